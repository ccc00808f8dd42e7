"""A starting ``tuning.yaml`` entry for an existing ``@triton.autotune`` kernel (``doit adopt``).

The decorator already says what to tune (its configs and key), so the entry takes them from the
imported kernel: the kernel reference, ``key``, ``configs`` (the decorator's list as
``module:attr`` when the module names it, else inline), and its first config as
``default_config``. What the decorator cannot say is left as marked placeholders: the launch
function, the inputs builder and the shapes to tune. Until they are filled in, loading the
manifest fails with one line naming the first placeholder.

A kernel whose module lies outside the project (an installed package, which the user cannot
switch to ``aot_tune.autotune``) also gets its launch function where one can be copied from the
library's own wrapper (:mod:`aot_tune.adopt.launch`): ``tuning_launch.py`` beside the manifest,
launching the kernel through ``aot_tune.untuned``. Where none can, the entry says why and what
to write.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from aot_tune.adopt.launch import LaunchFunction, defines, launch_function
from aot_tune.errors import TuneError, quoted, shorten
from aot_tune.manifest.writing import flow_mapping, kernels_is_last

#: What an unfilled placeholder reads as: not a ``module:attr``, so loading stops there.
PLACEHOLDER = "FILL_IN"
#: Where the entry of a kernel outside the project points its reader.
INSTALLED_DOC = "docs/adopting.md#a-kernel-you-cannot-edit-an-installed-package"
_LAUNCH_MODULE_DOC = ('"""Launch functions for tuning kernels of packages this project does not own: each launches '
                      'its kernel\nthrough aot_tune.untuned with the config the tuner passes (written by doit adopt; '
                      'edit freely)."""\n\n')


@dataclass(frozen=True)
class Adoption:
    """What ``doit adopt`` makes of a kernel: its entry name and YAML, and the launch function
    written for it (None where the kernel is the project's own, or none could be copied)."""

    name: str
    entry: str
    launch: LaunchFunction | None = None

    def printed(self) -> str:
        """The entry as printed: with the launch module it names, as comments, when not written."""
        if self.launch is None:
            return self.entry
        body = "".join(f"    #   {line}".rstrip() + "\n" for line in self.launch.source.splitlines())
        return self.entry + f"    # {self.launch.module}.py, beside tuning.yaml (--write writes it):\n" + body


def starting_entry(ref: str, root: str | os.PathLike = ".") -> tuple[str, str]:
    """``(name, yaml)``: the kernel's entry name and its entry, indented under ``kernels:``."""
    adoption = adopt(ref, root)
    return adoption.name, adoption.entry


def adopt(ref: str, root: str | os.PathLike = ".") -> Adoption:
    """The entry for ``ref`` (``module:kernel``), importable from ``root`` (the manifest's folder)."""
    from aot_tune.build.loading import resolve
    from aot_tune.manifest.config_list import common_options, config_as_dict

    module_name, _, attr = ref.partition(":")
    if not attr:
        raise TuneError(f"expected MODULE:KERNEL, got {quoted(ref)}; fix: name the decorated kernel, "
                        f"e.g. mylib.ops:my_kernel")
    root = Path(root).resolve()
    tuner = _autotuner(resolve(os.fspath(root), ref), ref)
    module = sys.modules[module_name]
    configs_name = next((n for n, v in vars(module).items() if v is tuner.configs and not n.startswith("__")), None)
    dicts = common_options([config_as_dict(None, c, f"{ref} configs[{i}]", None, ref)
                            for i, c in enumerate(tuner.configs)])
    name = _entry_name(tuner)
    configs = (f"    configs: {module_name}:{configs_name}\n" if configs_name else
               "    configs:\n" + "".join(f"      - {flow_mapping(c)}\n" for c in dicts))
    keys = ", ".join(tuner.keys)
    launch = _launch_lines(module, attr, name, root)
    entry = (f"  {name}:\n"
             f"    kernel: {ref}\n"
             f"{launch[0]}"
             f"    key: [{keys}]\n"
             f"{configs}"
             f"    default_config: {flow_mapping(dicts[0])}\n"
             f"    shapes:\n"
             f"      - {{{', '.join(f'{k}: {PLACEHOLDER}' for k in tuner.keys)}}}\n")
    return Adoption(name, entry, launch[1])


def _launch_lines(module: ModuleType, kernel: str, name: str, root: Path) -> tuple[str, LaunchFunction | None]:
    """The entry's launch and inputs lines, and the launch function written for an installed kernel."""
    inputs = f"    inputs: {PLACEHOLDER}  # module:function(shape, dtype, device) -> the launch's arguments\n"
    source = getattr(module, "__file__", None)
    if source is None or Path(source).resolve().is_relative_to(root):  # the project's own kernel
        return (f"    # {PLACEHOLDER}: launch, inputs and shapes (docs/adopting.md)\n"
                f"    launch: {PLACEHOLDER}  # module:function(*inputs) -> output; it launches the kernel\n"
                + inputs), None
    found = launch_function(module, kernel, name)
    if isinstance(found, str):
        return (f"    # {PLACEHOLDER}: launch, inputs and shapes ({INSTALLED_DOC})\n"
                f"    # {module.__name__} is outside this project and no launch can be copied from it: {found}.\n"
                f"    # Write one in your project that takes config and launches\n"
                f"    # aot_tune.untuned({module.__name__}.{kernel})[grid](..., **config)\n"
                f"    launch: {PLACEHOLDER}  # module:function(*inputs, config) -> output\n" + inputs), None
    arguments = ", ".join(found.arguments)
    return (f"    # {PLACEHOLDER}: inputs and shapes ({INSTALLED_DOC})\n"
            f"    launch: {found.ref}  # {found.wrapper} through aot_tune.untuned\n"
            f"    inputs: {PLACEHOLDER}  # module:function(shape, dtype, device) -> ({arguments}), {found.function}'s "
            f"arguments\n"), found


def write_adoption(manifest: str | os.PathLike, adoption: Adoption) -> Path | None:
    """Append the entry to the manifest and its launch function (if any) to the launch module
    beside it; nothing is written where either would clash. Returns the launch module written."""
    launch = adoption.launch
    path = Path(manifest).parent / f"{launch.module}.py" if launch is not None else None
    existing = path.read_text(encoding="utf-8") if path is not None and path.exists() else None
    try:
        clash = existing is not None and defines(existing, launch.function)
    except SyntaxError as exc:
        raise TuneError(f"{path}:{exc.lineno}: does not parse ({exc.msg}), so {launch.function} cannot be appended; "
                        f"fix: correct it, or print the entry (without --write) and paste it by hand") from None
    if clash:
        raise TuneError(f"{path}: {launch.function} exists already; fix: remove it first, or print the entry "
                        f"(without --write) and merge it by hand")
    write_entry(manifest, adoption.name, adoption.entry)
    if path is not None:
        if existing:  # imports the module has already are not repeated
            have = set(existing.splitlines())
            source = "".join(line for line in launch.source.splitlines(keepends=True)
                             if not (line.startswith(("import ", "from ")) and line.rstrip("\n") in have))
            path.write_text(existing.rstrip("\n") + "\n\n\n" + source, encoding="utf-8")
        else:
            path.write_text(_LAUNCH_MODULE_DOC + launch.source, encoding="utf-8")
    return path


def write_entry(manifest: str | os.PathLike, name: str, entry: str) -> None:
    """Append the entry to the manifest's ``kernels:`` (the last top-level key), or start one."""
    path = Path(manifest)
    if not path.exists():
        path.write_text("version: 1\nkernels:\n" + entry, encoding="utf-8")
        return
    text = path.read_text(encoding="utf-8")
    if not kernels_is_last(text):
        raise TuneError(f"{path}: 'kernels:' is not the last top-level key, so the entry cannot be appended; "
                        f"fix: move 'kernels:' to the end of the file, or paste the entry by hand")
    if re.search(rf"^  {re.escape(name)}:", text, re.MULTILINE):
        raise TuneError(f"{path}: kernels.{name} exists already; fix: remove it first, or print the entry "
                        f"(without --write) and merge it by hand")
    path.write_text(text + ("" if text.endswith("\n") else "\n") + entry, encoding="utf-8")


def _autotuner(obj: Any, ref: str) -> Any:
    """The ``@triton.autotune`` object under any ``@triton.heuristics`` (or aot_tune.autotune)."""
    seen = obj
    while seen is not None:
        if hasattr(seen, "configs") and hasattr(seen, "keys") and isinstance(seen.configs, (list, tuple)):
            if not seen.configs:
                raise TuneError(f"{shorten(ref)} has no configs; fix: give @triton.autotune its configs= list")
            return seen
        seen = getattr(seen, "fn", None)
    raise TuneError(f"{shorten(ref)} is not a @triton.autotune kernel ({type(obj).__name__}); fix: name the decorated "
                    f"kernel, or write the entry's space by hand (docs/reference/tuning-yaml.md)")


def _entry_name(tuner: Any) -> str:
    fn = tuner
    while hasattr(fn, "fn") and not callable(getattr(fn, "__code__", None)):
        fn = fn.fn
    name = re.sub(r"[^a-z0-9_]", "_", getattr(fn, "__name__", "kernel").lower())
    return name if re.match(r"[a-z_]", name) else f"_{name}"
