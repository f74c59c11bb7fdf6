"""`python -m kubemesh.kubelet`: one process hosting many emulated nodes.

Usage: `python -m kubemesh.kubelet --apiserver URL --nodes N [--node-prefix P] [--node-offset K]
[--zone Z] [--capacity cpu=8,memory=32Gi,pods=110] [--bugs no-node-lease] ...`
(`--help` lists every flag).
"""

from __future__ import annotations

import argparse
import sys

from kubemesh.services.process import startup

startup.prepare()  # before the heavy imports below (see kubemesh.services.process.startup)

from kubemesh.kubelet.running import add_arguments, run  # noqa: E402
from kubemesh.services.process import component  # noqa: E402


def main() -> int:
    """Run the kubelet in the shared component runtime; the process exit code."""
    parser = argparse.ArgumentParser(prog="python -m kubemesh.kubelet", description="kubemesh kubelet (many nodes)")
    add_arguments(parser)
    return component.main(component="kubelet", run=run, parser=parser)


if __name__ == "__main__":
    sys.exit(main())
