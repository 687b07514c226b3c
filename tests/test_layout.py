"""The layout the code keeps: the package is found one way (the editable install), each library module
name is used once, the library's import graph has no cycle and never imports a script, and no file
of bench/ or tests/ edits the import path."""

import ast
import importlib
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ("envs", "models", "search", "data", "training", "checkers", "solvers", "railway", "codegen")
SCRIPTS = ("ppo_or", "eval", "ppo_flatland", "ppo_priorities", "eval_flatland", "rlea", "eval_rlea")


def library_modules() -> dict[str, Path]:
    """ppoor's library modules (not the scripts) -> their files."""
    modules = {}
    for folder in LIBRARY:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[f"ppoor.{name}"] = path
    return modules


def imports_of(path: Path) -> set[str]:
    """The ppoor modules a file imports (``from ppoor.x import y`` counts ppoor.x.y when it is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("ppoor")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ppoor"):
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_the_package_is_the_checkout_and_nothing_else():
    import ppoor

    assert Path(ppoor.__file__) == ROOT / "__init__.py"
    assert not (ROOT / "ppoor").exists()
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("ppoor.ppoor")
    probe = "import ppoor.envs, ppoor.railway, ppoor.codegen, ppoor.checkers, ppoor.solvers; print('ok')"
    result = subprocess.run([sys.executable, "-c", probe], cwd="/", capture_output=True, text=True, timeout=300)
    assert result.stdout.strip() == "ok", result.stderr  # from any folder, not only the checkout's


def test_no_file_of_bench_or_tests_edits_the_import_path():
    for path in [*(ROOT / "bench").glob("*.py"), *(ROOT / "tests").glob("*.py")]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("path", "__path__"):
                value = node.value
                assert not (isinstance(value, ast.Name) and value.id == "sys"), f"{path.name} uses sys.path"


def test_each_library_module_name_is_used_once():
    """Packages count by their own name (``ppoor.training`` is ``training``)."""
    names = defaultdict(list)
    for module in library_modules():
        names[module.split(".")[-1]].append(module)
    repeated = {name: sorted(set(where)) for name, where in names.items() if len(set(where)) > 1}
    assert not repeated, repeated


def test_the_import_graph_has_no_cycle_and_never_reaches_a_script():
    modules = library_modules()
    graph = {name: {m for m in imports_of(path) if m in modules and m != name} for name, path in modules.items()}
    for name, path in modules.items():
        scripts = {m for m in imports_of(path) if m.split(".")[-1] in SCRIPTS and m.count(".") == 1}
        assert not scripts, f"{name} imports the script(s) {scripts}"
    # a package's __init__ importing its own submodules is not a cycle of the design: drop parent -> child edges
    graph = {name: {m for m in edges if not m.startswith(name + ".")} for name, edges in graph.items()}
    state = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in graph[node]:
            if state.get(nxt) == "open":
                pytest.fail("import cycle: " + " -> ".join([*trail[trail.index(nxt):], nxt]))
            if nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = "done"

    for node in graph:
        if node not in state:
            visit(node, [node])
