"""The shape of the code, as CI keeps it: no import circles, one import name, no pointer outside the repository.

The layers themselves are import-linter contracts (`[tool.importlinter]` in pyproject.toml,
run by `scripts/test`); what a layers contract cannot say is checked here.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import grimp

import kubemesh

REPO = Path(__file__).resolve().parent.parent.parent
PACKAGES = ("services", "apiserver", "kubelet", "controller_manager", "scheduler", "scenarios")


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (the import circles)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def imported_names(path: Path) -> list[str]:
    """The absolute module names a file imports (what the code imports, not what its strings say)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def test_no_import_circle_between_any_two_modules() -> None:
    """Every import counts, including the lazy and the type-checking ones: a circle is a circle."""
    g = grimp.build_graph("kubemesh", exclude_type_checking_imports=False)
    graph = {m: {d for d in g.find_modules_directly_imported_by(m) if d != m} for m in g.modules}
    # A package's __init__ importing its own submodules is how a package exports; not a circle.
    for m, deps in graph.items():
        graph[m] = {d for d in deps if not d.startswith(m + ".")}
    assert strongly_connected(graph) == []


def test_the_installed_distribution_has_one_import_name() -> None:
    """The repository keeps its top-level folders; installed, they are `kubemesh.<package>`."""
    for name in PACKAGES:
        link = REPO / "kubemesh" / name
        assert link.is_symlink() and link.resolve() == (REPO / name).resolve(), link
    assert Path(kubemesh.__file__).resolve().parent == (REPO / "kubemesh").resolve()
    offenders = [f"{p.relative_to(REPO)}: {name}"
                 for folder in (*PACKAGES, "tests", "benchmarks", "scripts")
                 for p in (REPO / folder).rglob("*.py") for name in imported_names(p)
                 if name.split(".")[0] in PACKAGES]
    assert offenders == [], "imports by the old top-level names"
    shell = [f"{p.relative_to(REPO)}" for p in (REPO / "scripts").iterdir()
             if re.search(r"python3? -m (" + "|".join(PACKAGES) + r")\b", p.read_text(errors="replace"))]
    assert shell == [], "scripts that run modules by the old top-level names"


def test_the_public_api_loads_every_name_it_exports() -> None:
    for name in kubemesh.__all__:
        assert getattr(kubemesh, name) is not None, name


def test_nothing_in_the_repository_points_outside_it() -> None:
    out = subprocess.run(["grep", "-rn", r"\.\./shared", "README.md", "docs/"], cwd=REPO, capture_output=True,
                         text=True, check=False)
    assert out.stdout == "", out.stdout
