"""A kernel's Triton source as data: the ``@triton.jit`` function beneath a library's decorators,
with every function and constant it reaches, so that the stages rebuild the kernel with Triton
alone instead of importing its library (fla-core's kernel modules import torch, torch._dynamo
and transformers: 4.6-6.6 s in each worker on a GPU host, after torch itself).

``capture`` runs where the library is imported (``aot_tune record``), ``rebuild`` anywhere Triton
is. What is captured is data, never code: where each function is (its file relative to the
``sys.path`` entry it came from, the file's digest, the line of its first decorator), what each
name it reads is, and ``triton.jit``'s arguments. ``rebuild`` reads the code from the installed
files, and only where every file's digest is the recorded one (``stale`` says why not). A kernel
that reaches something not expressible so (a function of the library that is not a Triton
function, a closure, an object of its own) raises ``SourceUnsupported``, and its stages import
the library as before.

What this relies on (triton 3.6 to 3.9), and why:

* ``triton.jit`` wraps a Python function in a ``JITFunction`` (``InterpretedFunction`` under
  ``TRITON_INTERPRET=1``) that keeps it in ``.fn`` and reads its source with
  ``inspect.getsourcelines``, which reads ``linecache`` for a file that is not on disk: the
  rebuilt function's "file" is its recorded source, placed at its recorded line;
* ``JITFunction.cache_key`` hashes the source without decorators, the line of the first
  decorator, the keys of the Triton functions it calls and the ``constexpr`` globals it reads:
  the same data rebuilds the same key. ``capture`` rebuilds the kernel at once and compares the
  keys, so a recorded source is one proven to compile to the library's binaries;
* the code generator resolves a name through the function's ``__globals__``: modules (``tl``),
  Triton functions, ``constexpr`` values and Triton's own builtins (``tl.exp`` under another
  name) are all a kernel may read;
* ``triton.runtime.Heuristics`` computes ``.values`` (meta-parameter -> function of the launch's
  arguments) in order and passes each to the next layer: ``heuristic_values`` does the same.
"""
from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import json
import linecache
import re
import sys
import textwrap
import threading
import types
from pathlib import Path
from typing import Any, Mapping

from aot_tune.triton_compat.layers import HEURISTICS, layer_kind

#: The format of a captured source (``capture``'s ``format``).
FORMAT = 1
_SCALARS = (bool, int, float, str, type(None))
_MODULES = ("triton", "math", "copy")


class SourceUnsupported(Exception):
    """A kernel whose source cannot stand alone: the reason, in one line."""


def _python_function(layer: Any) -> Any:
    return getattr(layer, "fn", None)


def _kind(obj: Any) -> str | None:
    """"jit" for a Triton function (compiled or interpreted), "constexpr_function" for one run at
    compile time (triton 3.9), else None."""
    name = type(obj).__name__
    if name in ("JITFunction", "InterpretedFunction") and type(obj).__module__.startswith("triton."):
        return "jit"
    if name == "ConstexprFunction" and type(obj).__module__.startswith("triton."):
        return "constexpr_function"
    return None


def _without_decorators(lines: list[str], where: str) -> str:
    """A function's source lines, from its first decorator, as Triton keeps them: dedented, from
    its ``def`` on."""
    text = textwrap.dedent("".join(lines))
    start = re.search(r"^def\s+\w+\s*\(", text, re.MULTILINE)
    if start is None:
        raise SourceUnsupported(f"{where}: no def in its source")
    return text[start.start():]


def _source_lines(fn: Any) -> tuple[str, int]:
    """The function's source without decorators and the line of its first decorator, as Triton
    reads them."""
    lines, first = inspect.getsourcelines(fn)
    return _without_decorators(lines, fn.__qualname__), first


def _file(fn: Any) -> tuple[str, str]:
    """The function's file relative to the ``sys.path`` entry it was imported from, and its digest."""
    path = inspect.getsourcefile(fn)
    module = fn.__module__ or ""
    if not path or not module or module == "__main__":
        raise SourceUnsupported(f"{fn.__qualname__} is not defined in an importable module")
    parts = module.split(".")
    for rel in ("/".join(parts) + ".py", "/".join(parts) + "/__init__.py"):
        if Path(path).as_posix().endswith("/" + rel):
            return rel, hashlib.sha256(Path(path).read_bytes()).hexdigest()
    raise SourceUnsupported(f"{module}: its file {path} is not where its module name says")


def _loaded_names(tree: ast.AST) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def _object_ref(name: str, value: Any, where: str) -> dict:
    """A Triton object a kernel names (``exp = tl.exp``): its module and name, where importing
    them gives the same object back."""
    module = getattr(value, "__module__", None) or ""
    qualname = getattr(value, "__qualname__", None) or getattr(value, "__name__", None) or ""
    if module.split(".")[0] == "triton" and qualname and "<" not in qualname:
        try:
            found = _import_object(module, qualname)
        except (ImportError, AttributeError):
            found = None
        # a builtin is named by where Triton defines it: the interpreter replaces the module's
        # attribute with its own while it runs, and a fresh process imports the builtin again
        if found is value or (found is not None and getattr(value, "__triton_builtin__", False)):
            return {"object": [module, qualname]}
    raise SourceUnsupported(f"{where} reads '{name}' ({type(value).__name__} from {module or '?'}), "
                            f"which is not a Triton function, a module or a constant")


def _import_object(module: str, qualname: str) -> Any:
    value: Any = importlib.import_module(module)
    for part in qualname.split("."):
        value = getattr(value, part)
    return value


def _options(obj: Any) -> dict:
    """The arguments of ``triton.jit`` that decide what is compiled."""
    given = getattr(obj, "kwargs", None) or {}  # an InterpretedFunction keeps them all here
    options = {}
    for name in ("do_not_specialize", "do_not_specialize_on_alignment", "noinline", "debug"):
        value = given.get(name, getattr(obj, name, None))
        if value:
            value = list(value) if isinstance(value, (list, tuple, set)) else value
            if not all(isinstance(v, _SCALARS) for v in (value if isinstance(value, list) else [value])):
                raise SourceUnsupported(f"{obj.__name__}: triton.jit's {name}={value!r} is not data")
            options[name] = value
    return options


def _capture_function(obj: Any, functions: dict[str, dict], files: dict[str, str]) -> str:
    from triton.language.core import constexpr

    fn = _python_function(obj)
    key = f"{fn.__module__}:{fn.__qualname__}"
    if key in functions:
        return key
    if "<" in fn.__qualname__:
        raise SourceUnsupported(f"{key} is defined inside another function")
    functions[key] = {}  # placeholder: a function that calls itself
    closure = inspect.getclosurevars(fn).nonlocals
    if closure:
        raise SourceUnsupported(f"{key} reads variables of an enclosing function ({', '.join(sorted(closure))})")
    src, line = _source_lines(fn)
    rel, digest = _file(fn)
    files[rel] = digest
    names: dict[str, dict] = {}
    for name in sorted(_loaded_names(ast.parse(src))):
        if name not in fn.__globals__:
            continue  # a local, an argument or a builtin
        value = fn.__globals__[name]
        if isinstance(value, types.ModuleType):
            if value.__name__.split(".")[0] not in _MODULES:
                raise SourceUnsupported(f"{key} reads the module {value.__name__}")
            names[name] = {"module": value.__name__}
        elif _kind(value):
            names[name] = {"function": _capture_function(value, functions, files)}
        elif isinstance(value, constexpr):
            if not isinstance(value.value, _SCALARS):
                raise SourceUnsupported(f"{key} reads the constexpr {name} = {value.value!r}")
            names[name] = {"constexpr": value.value}
        elif isinstance(value, _SCALARS):
            names[name] = {"value": value}
        else:
            names[name] = _object_ref(name, value, key)
    functions[key] = {"kind": _kind(obj), "module": fn.__module__, "name": fn.__name__, "line": line,
                      "file": rel, "names": names, "options": _options(obj)}
    return key


def capture(kernel: Any) -> dict:
    """The source of ``kernel`` (a Triton function) and of all it reaches, as JSON data; rebuilt
    here at once to prove it reproduces the kernel's cache key. Raises ``SourceUnsupported``."""
    if _kind(kernel) != "jit":
        raise SourceUnsupported(f"{type(kernel).__name__} is not a Triton function")
    functions: dict[str, dict] = {}
    files: dict[str, str] = {}
    try:
        entry = _capture_function(kernel, functions, files)
    except (OSError, TypeError, SyntaxError) as exc:
        raise SourceUnsupported(f"its source cannot be read ({type(exc).__name__}: {exc})") from None
    source = {"format": FORMAT, "kernel": entry, "functions": functions, "files": files,
              "cache_key": getattr(kernel, "cache_key", None) if type(kernel).__name__ == "JITFunction" else None}
    source = json.loads(json.dumps(source, allow_nan=False))  # plain data, as it will be read back
    try:
        rebuilt = _rebuild(source, _installed(source, None))
    except SourceUnsupported:
        raise
    except Exception as exc:
        raise SourceUnsupported(f"rebuilding it failed ({type(exc).__name__}: {exc})") from None
    if source["cache_key"] is not None and getattr(rebuilt, "cache_key", None) != source["cache_key"]:
        raise SourceUnsupported("the rebuilt kernel's cache key differs from the library's")
    return source


def _installed(source: Mapping[str, Any], path: list[str] | None) -> dict[str, str]:
    """The text of each file the source names, as importing would find it on ``path`` (default
    ``sys.path``); raises ``SourceUnsupported`` for one missing or not as recorded."""
    if source.get("format") != FORMAT:
        raise SourceUnsupported(f"its recorded source has format {source.get('format')!r}, this aot_tune reads {FORMAT}")
    texts = {}
    for rel, digest in dict(source.get("files") or {}).items():
        found = next((Path(entry or ".") / rel for entry in (path if path is not None else sys.path)
                      if (Path(entry or ".") / rel).is_file()), None)
        if found is None:
            raise SourceUnsupported(f"{rel} is not installed")
        data = found.read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            raise SourceUnsupported(f"{found} changed since it was recorded")
        texts[rel] = data.decode("utf-8")
    return texts


def stale(source: Mapping[str, Any], path: list[str] | None = None) -> str | None:
    """Why the recorded source cannot be rebuilt from the installed files (one is missing, or
    changed since it was recorded), or None where every file is as recorded."""
    try:
        _installed(source, path)
    except (SourceUnsupported, OSError, UnicodeDecodeError, TypeError, AttributeError) as exc:
        return str(exc)
    return None


_REBUILT: dict[str, Any] = {}
_lock = threading.Lock()


def rebuild(source: Mapping[str, Any], path: list[str] | None = None) -> Any:
    """The kernel of a ``capture``d source, built with Triton alone from the files installed on
    ``path`` (default ``sys.path``); one object per source in a process (the stages patch and
    cache on it as on an imported kernel). Raises ``SourceUnsupported`` where a file is missing
    or not as recorded."""
    digest = hashlib.sha256(json.dumps(source, sort_keys=True).encode()).hexdigest()
    with _lock:
        if digest not in _REBUILT:
            _REBUILT[digest] = _rebuild(source, _installed(source, path))
        return _REBUILT[digest]


def _function_source(text: str, line: int) -> str:
    """The function whose first decorator is on ``line`` of a file's ``text``, without decorators,
    as Triton reads it (``inspect.getsourcelines``)."""
    return _without_decorators(inspect.getblock(text.splitlines(True)[line - 1:]), f"line {line}")


def _rebuild(source: Mapping[str, Any], texts: Mapping[str, str]) -> Any:
    functions = source["functions"]
    built: dict[str, Any] = {}

    def build(key: str) -> Any:
        if key in built:
            return built[key]
        item = functions[key]
        scope: dict[str, Any] = {"__name__": item["module"], "__builtins__": __builtins__}
        # the function first, so that one calling itself finds its own name
        filename = f"<aot_tune: recorded {key}>"
        text = "\n" * (int(item["line"]) - 1) + _function_source(texts[item["file"]], int(item["line"]))
        text += "" if text.endswith("\n") else "\n"
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        exec(compile(text, filename, "exec"), scope)
        fn = scope[item["name"]]
        built[key] = wrapped = _wrap(item["kind"], fn, item.get("options") or {})
        for name, ref in item["names"].items():
            scope[name] = _resolve(ref, build)
        return wrapped

    return build(source["kernel"])


def _wrap(kind: str, fn: Any, options: Mapping[str, Any]) -> Any:
    import triton

    if kind == "constexpr_function":
        return triton.constexpr_function(fn)
    return triton.jit(fn, **dict(options))


def _resolve(ref: Mapping[str, Any], build: Any) -> Any:
    from triton.language.core import constexpr

    if "module" in ref:
        return importlib.import_module(ref["module"])
    if "function" in ref:
        return build(ref["function"])
    if "constexpr" in ref:
        return constexpr(ref["constexpr"])
    if "value" in ref:
        return ref["value"]
    return _import_object(*ref["object"])


def heuristic_layers(tuner: Any) -> list:
    """The ``@triton.heuristics`` layers between an autotuner and its Triton function, outermost
    first. Raises ``SourceUnsupported`` for any other layer there."""
    layers, layer = [], tuner.fn
    while _kind(layer) != "jit":
        if layer_kind(layer) != HEURISTICS:
            raise SourceUnsupported(f"{type(layer).__name__} wraps the kernel beneath the autotuner")
        layers.append(layer)
        layer = layer.fn
    return layers


def heuristic_values(layers: list, arguments: Mapping[str, Any]) -> dict:
    """What ``layers`` add to a launch with ``arguments`` (its arguments by name, its options and
    its config), as the layers compute them in turn."""
    given = dict(arguments)
    added = {}
    for layer in layers:
        for name, function in layer.values.items():
            given[name] = added[name] = function(dict(given))
    return added
