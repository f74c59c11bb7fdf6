"""`python -m scheduler`: the kube-scheduler emulation.

Usage: `python -m scheduler --apiserver URL [--bugs NAME,...] [--leader-elect]
[--percentage-of-nodes-to-score P] ...` (`--help` lists every flag).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from scheduler.running import add_arguments, run


def main() -> int:
    """Run the scheduler in the shared component runtime (or the fallback bootstrap)."""
    if importlib.util.find_spec("services.component") is not None:
        component = importlib.import_module("services.component")
        parser = argparse.ArgumentParser(prog="python -m scheduler", description="kubemesh kube-scheduler")
        add_arguments(parser)
        result = component.main(component="scheduler", run=run, parser=parser)
        return int(result or 0)
    from scheduler import standalone

    return standalone.main()


if __name__ == "__main__":
    sys.exit(main())
