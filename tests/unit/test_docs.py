"""The docs against the code: the tuning.yaml reference states the parser's real defaults and its
example loads; the front pages stay short; the README's Quickstart keeps the two commands that
.ci/run executes; relative links resolve. CPU only, no torch import.

The docs are read relative to this file's repository, so the test checks the checkout it sits in."""
from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest
import yaml

from aot_tune.manifest import STRATEGIES, STRATEGY_KEYS, SearchSettings, Defaults, load_manifest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference" / "tuning-yaml.md"


def _yaml_block() -> str:
    """The reference's annotated example: its first ```yaml block."""
    match = re.search(r"^```yaml\n(.*?)^```", REFERENCE.read_text(encoding="utf-8"), re.S | re.M)
    assert match, f"{REFERENCE}: no ```yaml block"
    return match.group(1)


def _commented_search_defaults(block: str) -> dict[str, object]:
    """``# seed: 0``-style lines under ``defaults.search``: defaults stated as comments, since a
    budgeted strategy's keys cannot be written under the exhaustive default."""
    lines = block.split("\n")
    start = next(i for i, line in enumerate(lines) if re.match(r"  search:", line))
    found: dict[str, object] = {}
    for line in lines[start + 1:]:
        if not line.startswith("    "):
            break
        m = re.match(r"\s+#\s*(seed|transfer|eta|rungs):\s*(\S+)", line)
        if m:
            found[m.group(1)] = yaml.safe_load(m.group(2))
    return found


def test_the_references_defaults_are_the_parsers() -> None:
    stated = yaml.safe_load(_yaml_block())["defaults"]
    code = Defaults()
    assert set(stated) == {f.name for f in dataclasses.fields(Defaults)}, "a default is missing from the doc"
    assert stated["dtypes"] == list(code.dtypes)
    assert stated["dtype_combos"] == {} == dict(code.dtype_combos) and stated["tolerance"] == {} == dict(code.tolerance)
    assert stated["targets"] == list(code.targets)
    assert stated["bench"] == dataclasses.asdict(code.bench)
    assert stated["cache"] == code.cache
    assert stated["generated"] == code.generated
    assert stated["devices"] == list(code.devices)
    assert stated["search"] == {"strategy": SearchSettings().strategy} == {"strategy": code.search.strategy}
    commented = _commented_search_defaults(_yaml_block())
    assert set(commented) == {"seed", "transfer", "eta", "rungs"}
    assert commented == {k: getattr(SearchSettings(), k) for k in commented}


def test_the_references_example_loads(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "kernels", tmp_path / "kernels")
    path = tmp_path / "tuning.yaml"
    path.write_text(_yaml_block(), encoding="utf-8")
    manifest = load_manifest(path)
    (gemm,) = manifest.kernels
    assert gemm.name == "gemm"
    assert gemm.bench.rep_ms == 50 and gemm.bench.warmup_ms == Defaults().bench.warmup_ms  # merged key by key
    assert gemm.search.strategy == "surrogate" and gemm.search.budget_configs == 40


def test_the_reference_names_every_search_strategy_and_its_keys() -> None:
    listed = re.search(r"^    strategy: exhaustive\s+# (.*)$", _yaml_block(), re.M)
    assert listed, "the example's search block lost its strategy line"
    assert [name.split()[0] for name in listed.group(1).split(", ")] == list(STRATEGIES)
    rules = REFERENCE.read_text(encoding="utf-8").split("**`search`.**", 1)[1].split("\n\n", 1)[0]
    for strategy, keys in STRATEGY_KEYS.items():
        assert f"`{strategy}`" in rules and all(f"`{key}`" in rules for key in keys), strategy


def _quickstart_commands(readme: str) -> list[str]:
    """What .ci/run executes: the lines of the first ```sh block under '## Quickstart'."""
    after = readme.split("\n## Quickstart", 1)[1]
    block = after.split("```sh\n", 1)[1].split("```", 1)[0]
    return block.splitlines()


def test_front_pages_are_short_and_the_quickstart_has_two_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    assert len((ROOT / "BENCHMARKS.md").read_text(encoding="utf-8").splitlines()) <= 300
    commands = _quickstart_commands(readme)
    assert len(commands) == 2 and all(c.strip() for c in commands), commands


def _doc_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").rglob("*.md"))]


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_CODE = re.compile(r"^```.*?^```|`[^`\n]*`", re.S | re.M)  # fenced blocks and inline code


@pytest.mark.parametrize("doc", _doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    text = _CODE.sub("", doc.read_text(encoding="utf-8"))
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor in the same page
        if not (doc.parent / target.split("#", 1)[0]).exists():
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)}: links to missing files: {broken}"
