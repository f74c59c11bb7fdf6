"""`python -m kubelet`: one process hosting many emulated nodes.

Usage: `python -m kubelet --apiserver URL --nodes N [--node-prefix P] [--node-offset K]
[--zone Z] [--capacity cpu=8,memory=32Gi,pods=110] [--bugs no-node-lease] ...`
(`--help` lists every flag).
"""

from __future__ import annotations

import importlib.util
import sys

from kubelet.running import add_arguments, run


def main() -> int:
    """Run the kubelet in the shared component runtime (or the fallback bootstrap)."""
    if importlib.util.find_spec("services.component") is not None:
        from services import component  # type: ignore[attr-defined,unused-ignore]

        result = component.main(component="kubelet", run=run, add_arguments=add_arguments)
        return int(result or 0)
    from kubelet import standalone

    return standalone.main()


if __name__ == "__main__":
    sys.exit(main())
