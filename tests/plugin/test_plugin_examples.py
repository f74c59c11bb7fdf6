"""The documented examples of the pytest plugin run, as a user would run them.

Every ```python block preceded by `<!-- kubemesh-example -->` in README.md and docs/compose.md
is written to a fresh folder and run by a separate pytest process (the plugin loads as an
installed plugin does; a conftest registers it where the entry point is not installed yet).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
MARK = "<!-- kubemesh-example -->"
BLOCK = re.compile(re.escape(MARK) + r"\s*```python\n(.*?)```", re.S)

CONFTEST = '''
import kubemesh.services.tools.pytest_plugin as kubemesh_plugin


def pytest_configure(config):
    if not config.pluginmanager.is_registered(kubemesh_plugin):
        config.pluginmanager.register(kubemesh_plugin, "kubemesh")
'''


def examples(doc: str) -> list[str]:
    path = REPO / doc
    return BLOCK.findall(path.read_text()) if path.exists() else []


@pytest.mark.slow
@pytest.mark.parametrize("doc", ["README.md", "docs/compose.md"])
def test_documented_example_passes(doc: str, tmp_path: Path) -> None:
    found = examples(doc)
    if not found:
        pytest.skip(f"{doc} has no `{MARK}` example yet")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    for i, code in enumerate(found):
        (tmp_path / f"test_example_{i}.py").write_text(code)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, f"{doc} example failed:\n{r.stdout[-6000:]}\n{r.stderr[-2000:]}"
    assert f"{len(found)} passed" in r.stdout
