"""A launch function in the user's project for a kernel of a package they cannot edit.

A ``@triton.autotune`` kernel from an installed package cannot be swapped to ``aot_tune.autotune``,
so the manifest's launch function must pass the tuner's candidate itself: the library's own
wrapper with its kernel launch ``KERNEL[grid](...)`` replaced by
``aot_tune.untuned(KERNEL)[grid](..., **config)`` and a ``config`` parameter added.

The wrapper is found by parsing the kernel's module with ``ast``, never by running it, and copied
as real code only where the copy provably means what the original does: a top-level function
whose every use of the kernel is a launch, whose free names are all globals of the library's
module (imported from it by name) or builtins, with no relative import, ``global``, ``nonlocal``
or ``yield``, and that compiles. Anything else (a kernel launched through an alias, a method, a
wrapper reading ``KERNEL.best_config``) gets no copy but the reason, so the user writes the
function knowing what it must do: a copy that guessed would tune a launch the library never makes.
The copy is regenerated from the library's source, so its formatting and comments are not kept.
"""
from __future__ import annotations

import ast
import builtins
import copy
import inspect
from dataclasses import dataclass
from types import ModuleType

#: The module the launch functions go to, beside the manifest.
LAUNCH_MODULE = "tuning_launch"


@dataclass(frozen=True)
class LaunchFunction:
    """A launch function for the manifest: ``module:function``, its source (imports included),
    the wrapper it copies and the arguments it takes (what the inputs builder returns)."""

    module: str
    function: str
    source: str
    wrapper: str
    arguments: tuple[str, ...]

    @property
    def ref(self) -> str:
        return f"{self.module}:{self.function}"


def launch_function(module: ModuleType, kernel: str, name: str) -> LaunchFunction | str:
    """The launch function for ``module.kernel`` copied from the module's wrapper, or why there is none."""
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError, SyntaxError) as exc:
        return f"its source cannot be read ({type(exc).__name__})"
    launchers = [node for node in tree.body if isinstance(node, ast.FunctionDef) and _launches(node, kernel)]
    if not launchers:
        return f"no top-level function of {module.__name__} launches it as {kernel}[grid](...)"
    wrapper = _bare(launchers[0])
    reason = _unsupported(wrapper, kernel) or _unresolved(module, wrapper)
    if reason:
        return f"{module.__name__}:{wrapper.name} {reason}"
    function = f"launch_{name.lstrip('_') or name}"
    copied = _rewritten(wrapper, kernel, function, f"{module.__name__}:{wrapper.name}")
    imports = _imports(module, sorted(_free_names(wrapper)))
    others = [f"{module.__name__}:{n.name}" for n in launchers[1:]]
    source = (f"# {function}: {module.__name__}:{wrapper.name}, {kernel} launched through aot_tune.untuned\n"
              + (f"# (also launching {kernel}: {', '.join(others)})\n" if others else "")
              + "".join(f"{line}\n" for line in ["import aot_tune", *imports])
              + "\n\n" + ast.unparse(copied) + "\n")
    try:
        compile(source, f"<{LAUNCH_MODULE}>", "exec")
    except SyntaxError as exc:
        return f"{module.__name__}:{wrapper.name} could not be copied ({exc.msg})"
    arguments = tuple(a.arg for a in (*wrapper.args.posonlyargs, *wrapper.args.args))
    return LaunchFunction(LAUNCH_MODULE, function, source, f"{module.__name__}:{wrapper.name}", arguments)


def defines(source: str, function: str) -> bool:
    """Whether a module's source defines ``function`` at top level."""
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function
               for node in ast.parse(source).body)


def _bare(function: ast.FunctionDef) -> ast.FunctionDef:
    """A copy without decorators (a registration would run twice) or annotations (the library may
    not evaluate them, ``from __future__ import annotations``): what is analysed and copied."""
    bare = copy.deepcopy(function)
    bare.decorator_list, bare.returns = [], None
    for node in ast.walk(bare):
        if isinstance(node, ast.arg):
            node.annotation = None
    return bare


def _is_launch(node: ast.AST, kernel: str) -> bool:
    """``kernel[grid](...)``."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == kernel)


def _launches(function: ast.FunctionDef, kernel: str) -> bool:
    return any(_is_launch(node, kernel) for node in ast.walk(function))


def _unsupported(function: ast.FunctionDef, kernel: str) -> str | None:
    """Why copying the function could change what it does, if it could."""
    launched = {id(node.func.value) for node in ast.walk(function) if _is_launch(node, kernel)}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and node.id == kernel and id(node) not in launched:
            return f"uses {kernel} otherwise than as {kernel}[grid](...) (line {node.lineno})"
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return f"declares {type(node).__name__.lower()} names (line {node.lineno})"
        if isinstance(node, ast.ImportFrom) and node.level:
            return f"imports relatively (line {node.lineno})"
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
            return "is a generator or coroutine"
    if "config" in _local_names(function) | _free_names(function) or "aot_tune" in _free_names(function):
        return "already uses the name config or aot_tune"
    return None


def _unresolved(module: ModuleType, function: ast.FunctionDef) -> str | None:
    missing = sorted(n for n in _free_names(function) if n not in vars(module))
    return f"uses {', '.join(missing)}, not a global of {module.__name__}" if missing else None


def _local_names(function: ast.FunctionDef) -> set[str]:
    """Every name the function (or anything nested in it) binds: a superset of its locals."""
    names = {a.arg for node in ast.walk(function) if isinstance(node, ast.arguments)
             for a in (*node.posonlyargs, *node.args, *node.kwonlyargs, node.vararg, node.kwarg) if a is not None}
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).partition(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not function:
            names.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _free_names(function: ast.FunctionDef) -> set[str]:
    """Names the function reads that it does not bind and that are not builtins: the module's globals."""
    loaded = {node.id for node in ast.walk(function) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    return loaded - _local_names(function) - set(dir(builtins))


def _imports(module: ModuleType, names: list[str]) -> list[str]:
    """Import lines binding each name as the library's module binds it."""
    lines, by_name = [], []
    for name in names:
        value = vars(module)[name]
        if isinstance(value, ModuleType):
            lines.append(f"import {value.__name__}" if value.__name__ == name else f"import {value.__name__} as {name}")
        else:
            by_name.append(name)
    if by_name:
        lines.append(f"from {module.__name__} import {', '.join(by_name)}")
    return lines


class _ThroughUntuned(ast.NodeTransformer):
    def __init__(self, kernel: str) -> None:
        self.kernel = kernel

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if _is_launch(node, self.kernel):
            untuned = ast.Attribute(ast.Name("aot_tune", ast.Load()), "untuned", ast.Load())
            node.func.value = ast.Call(untuned, [ast.Name(self.kernel, ast.Load())], [])
            node.keywords.append(ast.keyword(None, ast.Name("config", ast.Load())))
        return node


def _rewritten(wrapper: ast.FunctionDef, kernel: str, function: str, origin: str) -> ast.FunctionDef:
    """The bare wrapper renamed, with a keyword-only ``config`` passed to every launch."""
    copied = _ThroughUntuned(kernel).visit(copy.deepcopy(wrapper))
    copied.name = function
    copied.args.kwonlyargs.append(ast.arg("config"))
    copied.args.kw_defaults.append(None)
    doc = ast.Expr(ast.Constant(f"{origin}, launching the config the tuner passes as config."))
    body = copied.body[1:] if ast.get_docstring(copied, clean=False) is not None else copied.body
    copied.body = [doc, *body] if body else [doc, ast.Pass()]
    return ast.fix_missing_locations(copied)
