"""`python -m kubemesh.controller_manager`: the emulated kube-controller-manager.

Usage: `python -m kubemesh.controller_manager --apiserver URL [--controllers node-lifecycle,...]
[--profile 1.7|1.8|1.13|1.14|1.15|1.28|current] [--bugs legacy-pod-eviction,-no-out-of-service-gc]
[--leader-elect] [--node-monitor-grace-period 40s] ...` (`--help` lists every flag).
"""

from __future__ import annotations

import argparse
import sys

from kubemesh.services.process import startup

startup.prepare()  # before the heavy imports below (see kubemesh.services.process.startup)

from kubemesh.controller_manager.running import add_arguments, run  # noqa: E402
from kubemesh.services.process import component  # noqa: E402


def main() -> int:
    """Run the controller-manager in the shared component runtime; the process exit code."""
    parser = argparse.ArgumentParser(prog="python -m kubemesh.controller_manager",
                                     description="kubemesh kube-controller-manager")
    add_arguments(parser)
    return component.main(component="controller_manager", run=run, parser=parser)


if __name__ == "__main__":
    sys.exit(main())
