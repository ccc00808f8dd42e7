"""The ``exports:`` key: a kernel's tables also written in the formats libraries read (vLLM's
fused-MoE JSON, or a project's own ``module:function`` exporter), so a library can take aot_tune
as its tuner without changing its runtime code. A list of ``{to: FORMAT, path: TEMPLATE}``; a
kernel's list replaces the defaults'. The writing is aot_tune.exports; the rules of a path
template (its placeholders, how a value is made safe for a file name) live here, where the
manifest checks them.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any, Mapping

from aot_tune.manifest.checks import Ctx, as_list, as_mapping, as_string, described, did_you_mean, is_ident
from aot_tune.manifest.output_paths import path_problem, source_modules
from aot_tune.manifest.records import Defaults, ExportSpec, KernelSpec
from aot_tune.runs import WORK_DIR
from aot_tune.manifest.yaml_lines import Map

#: What every path may name besides the kernel's key dims.
PLACEHOLDERS = ("kernel", "device", "device_name", "dtype", "triton")
FORMATS = ("json",)
#: The longest a filled-in value may be (a device name can be 200 characters).
MAX_VALUE = 64
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_EXPORTER = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*", re.ASCII)
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_EXAMPLE = '{to: json, path: "configs/{kernel},device_name={device_name}.json"}'


def placeholders(template: str) -> tuple[str, ...]:
    """The names a template's ``{...}`` hold, in order (each once)."""
    return tuple(dict.fromkeys(_PLACEHOLDER.findall(template)))


def path_value(value: Any) -> str:
    """A value as a path takes it: bools as ``true``/``false``, every character outside
    ``[A-Za-z0-9_.-]`` as ``_`` (no ``/``, no space), at most MAX_VALUE characters, and never
    starting with ``.`` (no ``..``, no hidden file). ``NVIDIA H100 80GB HBM3`` -> ``NVIDIA_H100_80GB_HBM3``."""
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    text = _UNSAFE.sub("_", text)[:MAX_VALUE]
    return "_" + text[1:] if not text or text.startswith(".") else text


def fill(template: str, values: Mapping[str, Any]) -> str:
    """The template with every placeholder replaced by its value made safe (``path_value``)."""
    return _PLACEHOLDER.sub(lambda m: path_value(values[m.group(1)]), template)


# --------------------------------------------------------------------------- parsing


def parse_exports(ctx: Ctx, value: Any, key: str, line: int, base: Defaults) -> tuple[ExportSpec, ...]:
    """The list's form; what needs the kernel (its key dims, dtypes, outputs) is check_exports."""
    seq = as_list(ctx, value, key, line, _EXAMPLE, allow_empty=True)
    out: list[ExportSpec] = []
    for i, item in enumerate(seq):
        sub, iline = f"{key}[{i}]", seq.item_lines[i]
        m = as_mapping(ctx, item, sub, iline, allowed=("to", "path"), required=("to", "path"))
        to = _format(ctx, m["to"], f"{sub}.to", m.value_lines["to"])
        path = parse_template(ctx, m["path"], f"{sub}.path", m.value_lines["path"])
        twin = next((j for j, e in enumerate(out) if posixpath.normpath(e.path) == posixpath.normpath(path)), None)
        if twin is not None:
            ctx.fail(m.value_lines["path"], f"{sub}.path", f"the path {path!r} is also {key}[{twin}]'s",
                     "give each export its own path")
        out.append(ExportSpec(to=to, path=path, line=m.value_lines["path"]))
    return tuple(out)


def _format(ctx: Ctx, value: Any, key: str, line: int) -> str:
    if isinstance(value, str) and (value in FORMATS or _EXPORTER.fullmatch(value)):
        return value
    allowed = "json, or module.path:function naming your own exporter"
    fix = did_you_mean(value, FORMATS) if isinstance(value, str) else ""
    if isinstance(value, str) and ":" not in value and "." in value:
        module, attr = value.rsplit(".", 1)
        if _EXPORTER.fullmatch(f"{module}:{attr}"):
            fix = f"separate the function with a colon: {module}:{attr}"
    ctx.fail(line, key, f"unknown format {described(value)} (formats: {allowed})",
             fix or "write to: json, or to: mypackage.exports:my_format (a function(entries, info) -> str)")


def parse_template(ctx: Ctx, value: Any, key: str, line: int) -> str:
    s = as_string(ctx, value, key, line, '"configs/{kernel},device_name={device_name}.json"')
    rest = _PLACEHOLDER.sub("", s)
    if "{" in rest or "}" in rest:
        ctx.fail(line, key, f"{s!r} has an unmatched '{{' or '}}'", "write placeholders as {name}, e.g. {device_name}")
    for name in placeholders(s):
        if not is_ident(name):
            ctx.fail(line, key, f"placeholder {{{name}}} is not a name (formats such as {{M:04d}} are not taken)",
                     f"write a placeholder as {{name}}: {', '.join(f'{{{p}}}' for p in PLACEHOLDERS)} or a key dim")
    if posixpath.isabs(s) or re.match(r"[A-Za-z]:", s) or "\\" in s:
        ctx.fail(line, key, f"{s!r} is absolute or holds a '\\'; paths are relative to the manifest's folder, "
                 f"with '/' between folders", 'write e.g. path: "configs/{kernel}.json"')
    return s


# --------------------------------------------------------------------------- per kernel


def check_exports(ctx: Ctx, specs: tuple[KernelSpec, ...], kernels: Map, top: Map, root: Path) -> None:
    """What the form alone cannot show: placeholders the kernel has, a file per GPU (and per dtype
    for json), inside the project and apart from every cache, generated module and other kernel's
    export."""
    sources = source_modules(specs)
    outputs = {posixpath.normpath(getattr(s, what)): f"the {what} {'module' if what == 'generated' else 'file'} "
               f"of kernel {s.name!r}" for s in specs for what in ("cache", "generated")}
    outputs.update((source, "a module the manifest's kernels import") for source in sorted(sources))
    owners: dict[str, str] = {}
    for spec in specs:
        own = "exports" in kernels[spec.name]
        for i, export in enumerate(spec.exports):
            key = f"{'kernels.' + spec.name if own else 'defaults'}.exports[{i}].path"
            of = "" if own else f" (for kernel {spec.name!r})"
            fail = lambda problem, fix: ctx.fail(export.line, key, problem + of, fix)  # noqa: E731
            _check_placeholders(spec, export, fail)
            path = posixpath.normpath(export.path.replace("{kernel}", spec.name))
            problem = path_problem(path, root, sources)
            if problem:
                fail(problem, 'keep it inside the project, e.g. path: "configs/{kernel},device={device}.json"')
            if path == WORK_DIR or path.startswith(WORK_DIR + "/"):
                fail(f"{export.path!r} is inside {WORK_DIR}/, aot_tune's work folder, which is not checked in",
                     'write it where your library reads it, e.g. path: "configs/{kernel},device={device}.json"')
            pattern = _pattern(path)
            for output, what in outputs.items():
                if pattern.fullmatch(output):
                    fail(f"{export.path!r} may be {what}", "point the export at another file, e.g. under configs/")
            if path in owners and owners[path] != spec.name:
                fail(f"{export.path!r} is also an export of kernel {owners[path]!r}",
                     "put {kernel} in the path so each kernel gets its own files")
            owners[path] = spec.name


def _check_placeholders(spec: KernelSpec, export: ExportSpec, fail) -> None:
    names = placeholders(export.path)
    shadowed = [d for d in spec.key if d in PLACEHOLDERS]
    if shadowed:
        fail(f"key dim {shadowed[0]!r} has the name of the placeholder {{{shadowed[0]}}}",
             "rename the key dim, or export this kernel with no exports: []")
    known = (*PLACEHOLDERS, *spec.key)
    for name in names:
        if name not in known:
            hint = did_you_mean(name, known)
            fail(f"unknown placeholder {{{name}}} (placeholders: {', '.join(PLACEHOLDERS)}, and the key dims "
                 f"{', '.join(spec.key)})", hint or f"use one of them, e.g. {{{spec.key[0]}}}")
    if "device" not in names and "device_name" not in names:
        fail(f"{export.path!r} names neither {{device}} nor {{device_name}}: each GPU has its own table, so two "
             f"GPUs would write one file", "add {device_name} (vLLM's naming) or {device} to the path")
    if export.to == "json" and "dtype" not in names and len(spec.dtypes) > 1:
        fail(f"{export.path!r} does not name {{dtype}}, and the kernel has {len(spec.dtypes)} dtypes "
             f"({', '.join(spec.dtypes)}) whose configs would share one file",
             "add {dtype} to the path, e.g. ...,dtype={dtype}.json")


def _pattern(template: str) -> re.Pattern:
    """The files a template may fill in to (a value is one or more of ``[A-Za-z0-9_.-]``, not starting with a dot)."""
    parts = _PLACEHOLDER.split(template)
    return re.compile("".join(re.escape(p) if i % 2 == 0 else r"[A-Za-z0-9_-][A-Za-z0-9_.-]*"
                              for i, p in enumerate(parts)))
