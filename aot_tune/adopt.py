"""A starting ``tuning.yaml`` entry for an existing ``@triton.autotune`` kernel (``doit adopt``).

The decorator already says what to tune (its configs and key), so the entry takes them from the
imported kernel: the kernel reference, ``key``, ``configs`` (the decorator's list as
``module:attr`` when the module names it, else inline), and its first config as
``default_config``. What the decorator cannot say is left as marked placeholders: the launch
function, the inputs builder and the shapes to tune. Until they are filled in, loading the
manifest fails with one line naming the first placeholder.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from aot_tune.errors import TuneError, quoted, shorten

#: What an unfilled placeholder reads as: not a ``module:attr``, so loading stops there.
PLACEHOLDER = "FILL_IN"


def starting_entry(ref: str, root: str | os.PathLike = ".") -> tuple[str, str]:
    """``(name, yaml)``: the kernel's entry name and its entry, indented under ``kernels:``."""
    from aot_tune.build.loading import resolve
    from aot_tune.manifest.config_list import common_options, config_as_dict

    module_name, _, attr = ref.partition(":")
    if not attr:
        raise TuneError(f"expected MODULE:KERNEL, got {quoted(ref)}; fix: name the decorated kernel, "
                        f"e.g. mylib.ops:my_kernel")
    tuner = _autotuner(resolve(os.fspath(Path(root).resolve()), ref), ref)
    module = sys.modules[module_name]
    configs_name = next((n for n, v in vars(module).items() if v is tuner.configs and not n.startswith("__")), None)
    dicts = common_options([config_as_dict(None, c, f"{ref} configs[{i}]", None, ref)
                            for i, c in enumerate(tuner.configs)])
    name = _entry_name(tuner)
    configs = (f"    configs: {module_name}:{configs_name}\n" if configs_name else
               "    configs:\n" + "".join(f"      - {_flow(c)}\n" for c in dicts))
    keys = ", ".join(tuner.keys)
    entry = (f"  {name}:\n"
             f"    kernel: {ref}\n"
             f"    # {PLACEHOLDER}: launch, inputs and shapes (docs/adopting.md)\n"
             f"    launch: {PLACEHOLDER}  # module:function(*inputs) -> output; it launches the kernel\n"
             f"    inputs: {PLACEHOLDER}  # module:function(shape, dtype, device) -> the launch's arguments\n"
             f"    key: [{keys}]\n"
             f"{configs}"
             f"    default_config: {_flow(dicts[0])}\n"
             f"    shapes:\n"
             f"      - {{{', '.join(f'{k}: {PLACEHOLDER}' for k in tuner.keys)}}}\n")
    return name, entry


def write_entry(manifest: str | os.PathLike, name: str, entry: str) -> None:
    """Append the entry to the manifest's ``kernels:`` (the last top-level key), or start one."""
    path = Path(manifest)
    if not path.exists():
        path.write_text("version: 1\nkernels:\n" + entry, encoding="utf-8")
        return
    text = path.read_text(encoding="utf-8")
    top = [line for line in text.splitlines() if re.match(r"[^\s#]", line)]
    if not top or not top[-1].startswith("kernels:"):
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


def _flow(config: dict) -> str:
    """A config as a YAML flow mapping: names are identifiers, and a JSON scalar is a YAML one."""
    return "{" + ", ".join(f"{k}: {_scalar(v)}" for k, v in config.items()) + "}"


def _scalar(value: Any) -> str:
    """YAML 1.1 reads a float only with a dot (``1e-05`` would be a string): ``1.0e-05``."""
    text = json.dumps(value)
    if isinstance(value, float) and "e" in text and "." not in text:
        mantissa, _, exponent = text.partition("e")
        text = f"{mantissa}.0e{exponent if exponent[0] in '+-' else '+' + exponent}"
    return text
