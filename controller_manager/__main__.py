"""`python -m controller_manager`: the emulated kube-controller-manager.

Usage: `python -m controller_manager --apiserver URL [--controllers node-lifecycle,...]
[--profile 1.7|1.13|1.15|1.28|current] [--bugs legacy-pod-eviction,no-out-of-service-gc]
[--leader-elect] [--node-monitor-grace-period 40s] ...` (`--help` lists every flag).
"""

from __future__ import annotations

import importlib.util
import sys

from controller_manager.settings import add_arguments


def main() -> int:
    """Run in the shared component runtime, or the fallback bootstrap until it exists."""
    if importlib.util.find_spec("services.component") is not None:
        from controller_manager.standalone import run
        from services import component  # type: ignore[attr-defined,unused-ignore]

        result = component.main(component="controller_manager", run=run, add_arguments=add_arguments)
        return int(result or 0)
    from controller_manager import standalone

    return standalone.main()


if __name__ == "__main__":
    sys.exit(main())
