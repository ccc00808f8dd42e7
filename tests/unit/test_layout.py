"""The architecture holds: a package per stage, small modules, data flowing one way.

Read from the sources (nothing is imported), so a change that breaks a rule fails here with the
module that broke it, before anyone has to find the tangle by reading.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "aot_tune"
MAX_LINES = 500
MAX_TOP_LEVEL_MODULES = 16
#: Imports of Triton's internals: only aot_tune.triton_compat may use them (one file per upgrade).
TRITON_INTERNALS = ("triton.runtime", "triton.compiler", "triton.backends", "triton._C", "triton.knobs",
                    "triton.experimental")


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def module_level_imports(path: Path) -> set[str]:
    """Modules imported when this one is imported (not inside functions or TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for child in [node] if not isinstance(node, (ast.If, ast.Try)) else ast.walk(node):
            if isinstance(child, ast.Import):
                names |= {a.name for a in child.names}
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                names.add(child.module)
                names |= {f"{child.module}.{a.name}" for a in child.names}
    return names


def all_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_module_is_over_500_lines():
    long = {name: len(path.read_text().splitlines()) for name, path in modules().items()
            if path.name != "tuning_schema.py"}
    assert {n: c for n, c in long.items() if c > MAX_LINES} == {}


def test_the_top_of_the_package_stays_small():
    top = [p.name for p in PACKAGE.glob("*.py")]
    assert len(top) <= MAX_TOP_LEVEL_MODULES, sorted(top)


def test_only_the_commands_import_doit():
    users = {name for name, path in modules().items()
             if any(i == "doit" or i.startswith("doit.") for i in all_imports(path))}
    assert users and all(name.startswith("aot_tune.commands") for name in users), sorted(users)
    for rule in (ROOT / "rules").glob("*.py"):
        assert not any(i.startswith("doit") for i in all_imports(rule)), rule.name


def test_triton_internals_stay_in_triton_compat():
    leaks = {name: sorted(i for i in all_imports(path) if i.startswith(TRITON_INTERNALS))
             for name, path in modules().items() if not name.startswith("aot_tune.triton_compat")}
    assert {n: i for n, i in leaks.items() if i} == {}


def test_no_import_cycle_between_modules():
    known = modules()
    graph = {}
    for name, path in known.items():
        targets = set()
        for imported in module_level_imports(path):
            while imported and imported not in known:
                imported = imported.rpartition(".")[0]
            if imported and imported != name and not name.startswith(imported + "."):
                targets.add(imported)
        graph[name] = targets
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycle = trail[trail.index(target):] + [target] if target in trail else [node, target]
                raise AssertionError(f"import cycle: {' -> '.join(cycle)}")
            if target not in state:
                visit(target, trail + [target])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


#: What a kernel library's users install (`pip install aot-tune`): the runtime never imports the
#: pipeline's packages, which only the `aot-tune[tune]` extra installs.
PIPELINE_PACKAGES = ("doit", "yaml", "jinja2", "google.protobuf")


def runtime_closure() -> dict[str, set[str]]:
    """Every aot_tune module a launch can reach, from the package, the runtime and what generated
    modules import (the template and the checked-in ones), following imports inside functions
    too; each with the outside modules it imports."""
    known = modules()
    template = PACKAGE / "templates" / "generated_module.py.j2"
    start = {"aot_tune", *(n for n in known if n.startswith("aot_tune.runtime"))}
    start |= {line.split()[1] for line in template.read_text().splitlines() if line.strip().startswith("from ")}
    for path in (ROOT / "generated").glob("*.py"):
        start |= {i for i in all_imports(path) if i.startswith("aot_tune")}
    reached: dict[str, set[str]] = {}
    pending = sorted(start)
    while pending:
        name = pending.pop()
        while name not in known:
            name = name.rpartition(".")[0]
        if name in reached:
            continue
        imports = all_imports(known[name])
        reached[name] = {i for i in imports if not i.startswith("aot_tune")}
        pending.extend(i for i in imports if i.startswith("aot_tune"))
        parent = name.rpartition(".")[0]  # importing a module imports its packages first
        if parent:
            pending.append(parent)
    return reached


def test_the_runtime_never_imports_the_pipelines_packages():
    reached = runtime_closure()
    assert {"aot_tune.runtime.lookup", "aot_tune.runtime.decorator", "aot_tune.triton_compat.warm"} <= set(reached)
    assert not any(name.startswith(("aot_tune.manifest", "aot_tune.pipeline", "aot_tune.commands"))
                   for name in reached), sorted(reached)
    leaks = {name: sorted(i for i in imports if i.startswith(PIPELINE_PACKAGES)) for name, imports in reached.items()}
    assert {n: i for n, i in leaks.items() if i} == {}
