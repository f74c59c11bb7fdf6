"""A component's start-up preparation: no collector during imports, structlog without rich, and
both undone for the running process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def _run(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_prepare_then_imports_done_restores_the_collector_and_leaves_rich_importable() -> None:
    out = _run("""
        import gc, sys
        from kubemesh.services.process import startup
        startup.prepare()
        print("gc during imports:", gc.isenabled())
        print("rich loaded by structlog:", "rich" in sys.modules)
        import structlog  # already imported, without rich
        from kubemesh.services.process.logs import configure_logging
        configure_logging(component="t", instance="t").info("hello")
        startup.imports_done()
        startup.imports_done()
        print("gc after:", gc.isenabled())
        try:
            import rich
            print("rich importable:", rich is not None)
        except ImportError:
            print("rich importable: not installed")
    """)
    assert "gc during imports: False" in out
    assert "rich loaded by structlog: False" in out
    assert "gc after: True" in out
    assert "rich importable: True" in out or "rich importable: not installed" in out


def test_imports_done_leaves_a_collector_someone_else_turned_off() -> None:
    out = _run("""
        import gc
        gc.disable()
        from kubemesh.services.process import startup
        startup.prepare()
        startup.imports_done()
        print("gc:", gc.isenabled())
    """)
    assert out == "gc: False"


@pytest.mark.parametrize("module", ["kubemesh.scheduler", "kubemesh.kubelet", "kubemesh.controller_manager",
                                    "kubemesh.apiserver"])
def test_component_help_still_works(module: str) -> None:
    proc = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout
