"""`python -m kubemesh.scheduler`: the kube-scheduler emulation.

Usage: `python -m kubemesh.scheduler --apiserver URL [--bugs NAME,...] [--leader-elect]
[--percentage-of-nodes-to-score P] ...` (`--help` lists every flag).
"""

from __future__ import annotations

import argparse
import sys

from kubemesh.services.process import startup

startup.prepare()  # before the heavy imports below (see kubemesh.services.process.startup)

from kubemesh.scheduler.running import add_arguments, run  # noqa: E402
from kubemesh.services.process import component  # noqa: E402


def main() -> int:
    """Run the scheduler in the shared component runtime; the process exit code."""
    parser = argparse.ArgumentParser(prog="python -m kubemesh.scheduler", description="kubemesh kube-scheduler")
    add_arguments(parser)
    return component.main(component="scheduler", run=run, parser=parser)


if __name__ == "__main__":
    sys.exit(main())
