"""Rules for the files a kernel writes (its ``cache`` and ``generated`` module): a relative
template with only ``{kernel}``, inside the project, not over a kernel's source, not shared by
two kernels, and short enough for the file system.
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path
from typing import Any

from aot_tune.errors import quoted
from aot_tune.manifest.checks import Ctx, as_string
from aot_tune.manifest.records import KernelSpec
from aot_tune.manifest.yaml_lines import Map


def parse_template(ctx: Ctx, value: Any, key: str, line: int, what: str) -> str:
    """A relative output path whose only placeholder is {kernel}."""
    example = '"generated/{kernel}.py"' if what == "generated" else '"generated/{kernel}.tuning.txtpb"'
    s = as_string(ctx, value, key, line, example)
    rest = s.replace("{kernel}", "")
    if "{" in rest or "}" in rest:
        ctx.fail(
            line, key, f"{quoted(s)} has a placeholder other than {{kernel}}",
            f"use only {{kernel}}, e.g. {what}: {example}"
        )
    if posixpath.isabs(s) or os.path.isabs(s) or re.match(r"[A-Za-z]:", s):
        ctx.fail(
            line,
            key,
            f"{quoted(s)} is absolute; paths are relative to the manifest's folder",
            f"write e.g. {what}: {example}",
        )
    if what == "generated" and not s.endswith(".py"):
        ctx.fail(line, key, f"the generated module {quoted(s)} must be a .py file", f"write e.g. generated: {example}")
    return s


#: Longest file or folder name an output path may have: the file systems' 255 bytes, less the
#: temp-file affixes of atomic writes.
MAX_PATH_PART = 200
_CACHE_SUFFIXES = (".pb", ".txtpb", ".textproto", ".pbtxt")


def source_modules(specs: tuple[KernelSpec, ...]) -> set[str]:
    """The module files the manifest's references name: no output may be written over them."""
    sources = set()
    for spec in specs:
        for ref in (spec.kernel, spec.launch, spec.inputs, spec.reference, spec.vendor):
            if ref:
                module = Path(*ref.partition(":")[0].split("."))
                sources |= {posixpath.normpath((module.with_suffix(".py")).as_posix()),
                            posixpath.normpath((module / "__init__.py").as_posix())}
    return sources


def path_problem(path: str, root: Path, sources: set[str]) -> str:
    """Why a relative output path may not be written ('' if it may): outside the project, through
    a link leading out, a part too long for the file system, or a module a kernel imports."""
    normal = posixpath.normpath(path)
    if normal == ".." or normal.startswith("../") or normal == ".":
        return f"{quoted(path)} is outside the project folder"
    try:
        (root / normal).resolve().relative_to(root.resolve())
    except ValueError:
        return f"{quoted(path)} leads outside the project folder (through a link)"
    too_long = [part for part in normal.split("/") if len(part.encode()) > MAX_PATH_PART]
    if too_long:
        return (f"a part of {quoted(path)} is {len(too_long[0].encode())} bytes long, over the {MAX_PATH_PART} a file "
                f"name may take")
    if normal in sources:
        return f"{quoted(path)} is a module the manifest's kernels import: writing it would overwrite their source"
    return ""


def check_outputs_inside(ctx: Ctx, specs: tuple[KernelSpec, ...], kernels: Map, top: Map, root: Path) -> None:
    """Outputs stay inside the project, and never land on a module a kernel entry names."""
    sources = source_modules(specs)
    for spec in specs:
        km = kernels[spec.name]
        for what in ("cache", "generated"):
            path = getattr(spec, what)
            where = km if what in km else (top["defaults"] if "defaults" in top and what in top["defaults"] else km)
            line = where.value_lines.get(what, spec.line)
            key = f"kernels.{spec.name}.{what}"
            normal = posixpath.normpath(path)
            fix = f'keep it inside the project, e.g. {what}: "generated/{{kernel}}{".py" if what == "generated" else ".tuning.pb"}"'
            problem = path_problem(path, root, sources)
            if problem:
                ctx.fail(line, key, problem, "shorten the kernel name or the path" if "bytes long" in problem else fix)
            if what == "cache" and not normal.endswith(_CACHE_SUFFIXES):
                ctx.fail(line, key, f"the cache {quoted(path)} must end in {', '.join(_CACHE_SUFFIXES)} "
                         f"(binary, or text for the last three)", 'write e.g. cache: "generated/{kernel}.tuning.pb"')


def check_outputs_distinct(ctx: Ctx, specs: tuple[KernelSpec, ...], kernels: Map) -> None:
    """Two kernels writing the same cache or module would overwrite each other."""
    owners: dict[str, str] = {}
    for spec in specs:
        for what in ("cache", "generated"):
            path = posixpath.normpath(getattr(spec, what))
            km = kernels[spec.name]
            key = f"kernels.{spec.name}.{what}"
            line = km.value_lines.get(what, spec.line)
            if path in owners:
                ctx.fail(
                    line,
                    key,
                    f"output path {quoted(path)} is also the {owners[path]}",
                    "put {kernel} in the path so each kernel gets its own file",
                )
            owners[path] = f"{what} path of kernel {quoted(spec.name)}"
