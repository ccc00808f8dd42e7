"""A recording folded into the project: the launches of each kernel into its ``recordings/``
file, and tuning.yaml's entries, one per kernel and dtype, created or given the new shapes.

An entry is ordinary YAML the user may edit; recording again only appends the shapes of new
launches to its ``shapes:`` list, so what was edited stays, and the same workload recorded
twice changes no byte. Every value written comes from validated data (identifiers, sizes,
names matching the manifest's own rules, JSON scalars), and the new manifest is parsed before
it replaces the old one: a recording never leaves a manifest that does not load.
"""
from __future__ import annotations

import json
import os
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

from aot_tune.dtypes import canonical
from aot_tune.errors import TuneError
from aot_tune.fileio import write_atomic
from aot_tune.manifest import KernelSpec, load_manifest
from aot_tune.manifest.writing import flow_mapping, kernels_is_last
from aot_tune.record.recording import (DTYPES_DIM, LAUNCH_DIM, RECORDINGS, REPLAY, RecordedKernel, RecordedLaunch,
                                       read_recording, recording_path, write_recording)
from aot_tune.runtime.autotuners import dtype_code
from aot_tune.space import KEY_LABEL

MAX_SIZE = 2**40


def _new_manifest(target: str) -> str:
    target = target if re.fullmatch(r"sm[0-9]{2,3}a?", target) else ""
    defaults = f"defaults:\n  targets: [{target}]   # the GPU the workload was recorded on\n" if target else ""
    return ("# What aot_tune tunes here, recorded by `aot_tune record`. Reference: the tuning.yaml reference\n"
            "# (docs/reference/tuning-yaml.md of aot_tune); recorded entries: docs/recording.md.\n"
            f"version: 1\n{defaults}kernels:\n")


@dataclass
class Folded:
    """What a recording added: entries created, shapes added per entry, and what was left out."""

    created: list[str] = field(default_factory=list)
    added: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    timed: list[str] = field(default_factory=list)  # entries given only their compile seconds

    def lines(self) -> list[str]:
        out = [f"kernels.{name}: {count} new shape{'s' if count != 1 else ''}"
               + (" (new entry)" if name in self.created else "") for name, count in self.added.items()]
        out += [f"kernels.{name}: its compile seconds on this GPU recorded" for name in self.timed]
        return out + [f"left out: {why}" for why in self.skipped]


@dataclass
class Raw:
    """The hook's lines read back: one recording per kernel (first-seen order, with the median
    seconds of its compiles on the target, where any was seen), what it refused, and the GPU
    target the launches ran on ("" on the CPU)."""

    kernels: list[RecordedKernel]
    refused: list[str]
    target: str


def read_raw(path: str | os.PathLike) -> Raw:
    """The hook's JSON lines, as the processes of one recorded command appended them."""
    kernels: dict[str, RecordedKernel] = {}
    refused: list[str] = []
    compiles: dict[str, list[float]] = defaultdict(list)
    sources: dict[str, dict] = {}
    target = ""
    text = Path(path).read_text(encoding="utf-8") if Path(path).exists() else ""
    for line in text.splitlines():
        try:
            item = json.loads(line)
        except ValueError:  # the last line of a process killed mid-write
            continue
        if "target" in item:
            target = target or str(item["target"])
            continue
        if "refused" in item:
            refused.append(f"{item['refused']['kernel']}: {item['refused']['reason']}")
            continue
        if "source" in item:  # each process writes one before the kernel's first launch: the first kept
            sources.setdefault(str(item["source"]["kernel"]), item["source"])
            continue
        if "compiled" in item:  # the compile runs inside the launch: its line comes before the launch's
            compiles[str(item["compiled"]["kernel"])].append(float(item["compiled"]["seconds"]))
            continue
        data = item["kernel"]
        kernel = RecordedKernel.from_json({**data, "format": 1, "launches": {}})
        launch = RecordedLaunch.from_json(item["launch"])
        known = kernels.setdefault(kernel.ref, kernel)
        known.launches.setdefault(launch.launch_id(kernel.ref), launch)
    kernels = {ref: replace(k, source=sources[ref].get("source"), source_refused=str(sources[ref].get("refused", "")))
               if ref in sources else k for ref, k in kernels.items()}
    if target:
        kernels = {ref: replace(k, compile_s={target: round(statistics.median(compiles[ref]), 3)})
                   if compiles.get(ref) else k for ref, k in kernels.items()}
    return Raw(list(kernels.values()), refused, target)


def fold(manifest: str | os.PathLike, kernels: list[RecordedKernel], target: str = "") -> Folded:
    """Fold recorded kernels into the manifest (created if missing: for ``target``, the GPU they
    ran on, where they ran on one) and its recordings."""
    path = Path(manifest)
    root = path.parent
    text = path.read_text(encoding="utf-8") if path.exists() else _new_manifest(target)
    specs = load_manifest(path, write_caches=False).kernels if path.exists() else ()
    folded = Folded()
    recordings: list[tuple[Path, RecordedKernel]] = []
    appended: list[str] = []
    shapes_for: dict[str, list[str]] = defaultdict(list)
    names = {spec.name for spec in specs}
    for kernel in kernels:
        by_hand = [s.name for s in specs if s.kernel == kernel.ref and not s.launch.startswith(REPLAY + ":")]
        if by_hand:
            folded.skipped.append(f"{kernel.ref}: tuning.yaml declares it by hand (kernels.{by_hand[0]})")
            continue
        for dtype, launches in _by_dtype(kernel).items():
            if canonical(dtype) != dtype:  # e.g. bool: the entry could not load, and no kernel of this run would fold
                folded.skipped.append(f"{kernel.ref}: {len(launches)} launch(es) with no floating tensor and a first "
                                      f"tensor of {dtype}, which tuning.yaml cannot name as a dtype; they keep the "
                                      f"library's autotuning")
                continue
            name = _entry_for(specs, kernel.ref, dtype) or _new_name(kernel.ref, dtype, names)
            file = recording_path(root, name)
            new = replace(kernel, launches=launches)
            old = read_recording(file) if file.exists() else None
            if old is not None and not old.same_decorator(new):
                folded.skipped.append(f"{kernel.ref}: its decorator's key or configs changed since "
                                      f"{file.relative_to(root)} was recorded; fix: delete that file and "
                                      f"kernels.{name}, then record again")
                continue
            key_dims = tuple(k for k in kernel.key if any(a.name == k for a in next(iter(launches.values())).arguments))
            fresh = {}
            for launch_id, launch in sorted(launches.items()):
                if old is not None and launch_id in old.launches:
                    continue
                shape = _shape(kernel, key_dims, launch_id, launch)
                if isinstance(shape, str):
                    folded.skipped.append(shape)
                    continue
                fresh[launch_id] = shape
            timed = old is not None and any(t not in old.compile_s for t in new.compile_s)
            if not fresh and not timed:
                continue
            kept = replace(new, launches={lid: launches[lid] for lid in fresh})
            merged = old.merged(kept) if old is not None else kept
            recordings.append((file, merged))
            if not fresh:  # only its compile seconds are new
                folded.timed.append(name)
                continue
            shapes_for[name].extend(flow_mapping(shape) for shape in fresh.values())
            folded.added[name] = len(fresh)
            if name not in names and name not in folded.created:
                names.add(name)
                folded.created.append(name)
                appended.append(_entry_text(name, kernel, key_dims, dtype))
    if not recordings:
        return folded
    text = _with_shapes(text, path, specs, shapes_for, appended, folded.created)
    _check_loads(path, text)
    for file, merged in recordings:
        write_recording(file, merged)
    write_atomic(path, text.encode())
    return folded


def _by_dtype(kernel: RecordedKernel) -> dict[str, dict[str, RecordedLaunch]]:
    groups: dict[str, dict[str, RecordedLaunch]] = defaultdict(dict)
    for launch_id, launch in kernel.launches.items():
        groups[launch.primary_dtype()][launch_id] = launch
    return dict(groups)


def _entry_for(specs: tuple[KernelSpec, ...], ref: str, dtype: str) -> str | None:
    for spec in specs:
        if spec.kernel == ref and spec.launch.startswith(REPLAY + ":") and spec.dtypes == (dtype,):
            return spec.name
    return None


def _new_name(ref: str, dtype: str, taken: set[str]) -> str:
    """The kernel function's name, lower case; then with its dtype, then its module, where taken."""
    module, _, attr = ref.partition(":")
    base = re.sub(r"[^a-z0-9_]", "_", attr.lower()) or "kernel"
    base = base if re.match(r"[a-z_]", base) else f"k_{base}"
    for name in (base, f"{base}_{dtype}", f"{re.sub(r'[^a-z0-9_]', '_', module.lower())}_{base}_{dtype}"):
        name = name[:64]
        if name not in taken:
            return name
    for i in range(2, 10_000):
        if f"{base}_{i}" not in taken:
            return f"{base}_{i}"
    raise TuneError(f"no free entry name for {ref}")


def _shape(kernel: RecordedKernel, key_dims: tuple[str, ...], launch_id: str, launch: RecordedLaunch
           ) -> dict | str:
    """The launch as a shape (key dims, its tensors' dtypes, its id), or why it cannot be one."""
    named = {a.name: a for a in launch.arguments}
    shape = {}
    for dim in key_dims:
        argument = named.get(dim)
        value = argument.scalar if argument is not None and argument.tensor is None else None
        if not _key_value(value):
            return (f"{kernel.ref}: a launch with {dim}={value!r} (a tuning.yaml key holds sizes >= 1, "
                    f"true/false or short names); it keeps the library's autotuning")
        shape[dim] = value
    code = dtype_code(launch.dtypes())
    if not KEY_LABEL.fullmatch(code):
        return f"{kernel.ref}: {len(launch.dtypes())} tensor arguments are more than a key can name"
    shape[DTYPES_DIM] = code
    shape[LAUNCH_DIM] = launch_id
    return shape


def _key_value(value) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return 1 <= value <= MAX_SIZE
    return isinstance(value, str) and bool(KEY_LABEL.fullmatch(value))


def _entry_text(name: str, kernel: RecordedKernel, key_dims: tuple[str, ...], dtype: str) -> str:
    lines = [f"  {name}:",
             f"    # recorded by `aot_tune record` ({RECORDINGS}/{name}.json): the decorator's configs and key,",
             "    # one shape per distinct launch; `aot_tune record` appends new launches' shapes below",
             f"    kernel: {kernel.ref}",
             f"    launch: {REPLAY}:launch",
             f"    inputs: {REPLAY}:make_inputs",
             f"    reference: {REPLAY}:reference",
             f"    key: [{', '.join((*key_dims, DTYPES_DIM))}]",
             f"    dtypes: [{dtype}]",
             "    configs:"]
    lines += [f"      - {flow_mapping(config)}" for config in kernel.configs]
    lines.append("    shapes:")
    return "\n".join(lines) + "\n"


def _with_shapes(text: str, path: Path, specs: tuple[KernelSpec, ...], shapes_for: dict[str, list[str]],
                 appended: list[str], created: list[str]) -> str:
    """The manifest text with new shapes after each existing entry's last shape, and new entries
    (with theirs) at the end of ``kernels:``."""
    lines = text.splitlines(keepends=True)
    inserts: list[tuple[int, list[str]]] = []
    for spec in specs:
        if spec.name in shapes_for:
            at, indent = _shapes_end(lines, spec, path)
            inserts.append((at, [f"{indent}- {shape}\n" for shape in shapes_for[spec.name]]))
    for at, new in sorted(inserts, reverse=True):
        lines[at:at] = new
    text = "".join(lines)
    if appended:
        if not kernels_is_last(text):
            raise TuneError(f"{path}: 'kernels:' is not the last top-level key, so recorded entries cannot be "
                            f"appended; fix: move 'kernels:' to the end of the file")
        text = text + ("" if text.endswith("\n") else "\n")
        for name, entry in zip(created, appended):
            text += entry + "".join(f"      - {shape}\n" for shape in shapes_for[name])
    return text


def _shapes_end(lines: list[str], spec: KernelSpec, path: Path) -> tuple[int, str]:
    """Where a new shape of the entry goes (after its last shape) and the items' indentation."""
    start = spec.line - 1
    entry_indent = _indent(lines[start])
    shapes_at = None
    end = len(lines)
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if line.strip() and not line.lstrip().startswith("#") and _indent(line) <= entry_indent:
            end = i
            break
        if line.strip() == "shapes:":
            shapes_at = i
    if shapes_at is None:
        raise TuneError(f"{path}:{spec.line}: kernels.{spec.name} has no block 'shapes:' list to append the new "
                        f"launches to; fix: write its shapes one per line under 'shapes:'")
    last, indent = None, None
    for i in range(shapes_at + 1, end):
        line = lines[i]
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if _indent(line) <= _indent(lines[shapes_at]):
            break
        if line.lstrip().startswith("- ") and indent is None:
            indent = " " * _indent(line)
        last = i
    if last is None:
        raise TuneError(f"{path}:{shapes_at + 1}: kernels.{spec.name}.shapes is empty or not a block list; "
                        f"fix: write its shapes one per line, '- {{...}}'")
    return last + 1, indent


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _check_loads(path: Path, text: str) -> None:
    """Parse the new manifest beside the old one before it replaces it."""
    trial = path.with_name(f".{path.name}.recorded")
    trial.write_text(text, encoding="utf-8")
    try:
        load_manifest(trial, write_caches=False)
    except TuneError as err:
        raise TuneError(f"the recorded entries would not load ({err}); {path} was left as it was") from None
    finally:
        trial.unlink(missing_ok=True)
