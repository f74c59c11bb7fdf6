"""What a component process does before its first heavy import, and once its imports are done.

A cold start of a mesh is five interpreters importing at once on a machine that may have two
cores, so every component's import time is on the critical path. `prepare()`, called first thing
by each component's `__main__` (before it imports its own modules), takes two costs out that
buy nothing in a component:

* **The cyclic collector during imports.** Importing allocates hundreds of thousands of
  long-lived objects (modules, classes, functions) and no cyclic garbage; the collector would
  walk the growing heap again and again for nothing (about a quarter of a component's import
  CPU). It is disabled until `imports_done()`, which the runtime calls before it starts the
  event loop, so a running component collects as before (the apiserver's own tuning,
  `kubemesh.services.process.gctuning`, starts after that).
* **rich, pulled in by structlog.** structlog's console renderer imports `rich`, when it is
  installed, for pretty tracebacks. Components log JSON (`kubemesh.services.process.logs`) and
  never use it, so structlog is imported once with `rich` hidden and falls back to the plain
  formatter it has without rich. `rich` itself stays importable afterwards.

Both are process-wide and idempotent; a library user importing kubemesh never runs them.
"""

from __future__ import annotations

import gc
import sys

_disabled_here = False


def prepare() -> None:
    """Call first thing in a component's `__main__` (before its other imports)."""
    global _disabled_here
    if gc.isenabled():
        gc.disable()
        _disabled_here = True
    if "structlog" not in sys.modules and "rich" not in sys.modules:
        sys.modules["rich"] = None  # type: ignore[assignment]  # makes `import rich` raise ImportError
        try:
            import structlog  # noqa: F401, PLC0415 - imported here, once, without rich
        finally:
            del sys.modules["rich"]


def imports_done() -> None:
    """Turn the collector back on if `prepare()` turned it off (idempotent)."""
    global _disabled_here
    if _disabled_here:
        _disabled_here = False
        gc.enable()
