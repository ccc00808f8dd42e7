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


def imported(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, str | None, int]]:
    """Every aot_tune import of a module, at module level, inside functions or under TYPE_CHECKING
    (each is a dependency): (the module imported, the name taken from it or None, line)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names if a.name.startswith("aot_tune")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("aot_tune") and not node.level:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.append((submodule, None, node.lineno) if submodule in known
                             else (node.module, alias.name, node.lineno))
    return found


def owner(imported_name: str, known: dict[str, Path]) -> str:
    """The known module an import names (``import a.b.c`` of a function's module: that module)."""
    while imported_name and imported_name not in known:
        imported_name = imported_name.rpartition(".")[0]
    return imported_name


def with_rules() -> dict[str, Path]:
    """The package's modules and the doit rules, which install as aot_tune.rules."""
    known = modules()
    for path in sorted((ROOT / "rules").glob("*.py")):
        known["aot_tune.rules" + ("" if path.stem == "__init__" else f".{path.stem}")] = path
    return known


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules it imports anywhere in it (not its own packages, which import first)."""
    known = with_rules()
    graph = {}
    for name, path in known.items():
        targets = {owner(module, known) for module, _, _ in imported(name, path, known)}
        graph[name] = {t for t in targets if t and t != name and not name.startswith(t + ".")}
    return graph


def first_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> list[str] | None:
        state[node] = 1
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return trail[trail.index(target):] + [target]
            if target not in state and (cycle := visit(target, trail + [target])):
                return cycle
        state[node] = 2
        return None

    for name in sorted(graph):
        if name not in state and (cycle := visit(name, [name])):
            return cycle
    return None


def test_no_import_cycle_between_modules():
    """Imports inside functions and under TYPE_CHECKING count: each is a dependency all the same."""
    cycle = first_cycle(import_graph())
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_no_import_cycle_between_packages():
    """The top-level packages and modules form layers: following a tune from ``doit tune`` to
    ``generated/<kernel>.py``, each call goes down a layer or stays in its own package."""
    layer = lambda module: ".".join(module.split(".")[:2])  # noqa: E731 - aot_tune.<package or module>
    packages: dict[str, set[str]] = {}
    for name, targets in import_graph().items():
        packages.setdefault(layer(name), set()).update(layer(t) for t in targets if layer(t) != layer(name))
    cycle = first_cycle(packages)
    assert cycle is None, f"packages import each other: {' -> '.join(cycle)}"


def test_no_module_takes_another_modules_underscore_names():
    """A name with a leading underscore is used only in its own module: never imported from
    another one, nor read off an imported module."""
    known = with_rules()
    taken = []
    for name, path in known.items():
        imports = imported(name, path, known)
        taken += [f"{name}:{line} imports {module}.{what}" for module, what, line in imports
                  if what and what.startswith("_") and not what.startswith("__") and owner(module, known) != name]
        aliases = {}
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    full = alias.name if isinstance(node, ast.Import) else f"{node.module}.{alias.name}"
                    if full in known and full != name:
                        aliases[alias.asname or alias.name] = full
        taken += [f"{name}:{node.lineno} reads {aliases[node.value.id]}.{node.attr}" for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                  and isinstance(node.value, ast.Name) and node.value.id in aliases]
    assert taken == []


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
