"""The command line speaks for itself: a line doit cannot parse names the option and --help, help
and errors name the program the user typed, and without the ``tune`` extra every way in says in
one line what to install, while doit keeps working in other projects."""
from __future__ import annotations

import subprocess
import sys

import pytest
from tunerun import REPO, subprocess_env

from aot_tune.commands import INSTALL, cli

#: Python with the pipeline's packages made unimportable, as where only `pip install aot-tune` ran.
WITHOUT_PIPELINE = "import sys; sys.modules.update(dict.fromkeys(['yaml', 'jinja2', 'google.protobuf']));"


#: doit as where this checkout is installed: the entry points of its pyproject.toml (whatever
#: aot_tune is installed in this environment, its entry points may name other commands).
INSTALLED = f"""
try:
    import tomllib
except ModuleNotFoundError:
    import tomli as tomllib
from importlib.metadata import EntryPoint
import doit.plugin
points = tomllib.loads(open({str(REPO / "pyproject.toml")!r}).read())["project"]["entry-points"]
doit.plugin.entry_points_impl = lambda: lambda group: [EntryPoint(name, value, group)
                                                       for name, value in points.get(group, {{}}).items()]
"""


def run(cwd, code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=subprocess_env(), capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("args, expected", [
    (["tune", "--dry-runs"], "ERROR: aot_tune tune: unknown option --dry-runs; see aot_tune tune --help"),
    (["tune", "--manifest"], "ERROR: aot_tune tune: option --manifest needs a value; see aot_tune tune --help"),
    (["tune", "-n", "many"], "ERROR: aot_tune tune: bad value for --process/-n: invalid literal for int() with "
                             "base 10: 'many'; see aot_tune tune --help"),
    (["check", "-x"], "ERROR: aot_tune check: unknown option -x; see aot_tune check --help"),
    (["list", "--dry-run"], "ERROR: aot_tune list: unknown option --dry-run; see aot_tune list --help"),
])
def test_an_option_doit_cannot_parse_is_one_line(tmp_path, monkeypatch, capsys, args, expected):
    monkeypatch.chdir(tmp_path)
    assert cli.main(args) == 3
    assert capsys.readouterr().err == expected + "\n"


def test_an_unknown_option_under_doit_names_doit(tmp_path):
    proc = run(tmp_path, f"{INSTALLED}\nfrom doit.doit_cmd import DoitMain\n"
                         f"raise SystemExit(DoitMain().run(['tune', '--{'x' * 10_000}']))")
    assert proc.returncode == 3
    line, = proc.stderr.splitlines()
    assert line.startswith("ERROR: doit tune: unknown option --xxx") and line.endswith("; see doit tune --help")
    assert len(line) < 200 and "CmdOption" not in line


def test_help_and_errors_name_the_program_typed(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["help"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("aot_tune -- ahead-of-time tuning") and "pydoit" not in shown
    assert "aot_tune tune " in shown and "aot_tune help <command>" in shown
    assert cli.main(["--help"]) == 0 and capsys.readouterr().out == shown
    assert cli.main(["help"], program="python -m aot_tune") == 0
    assert "python -m aot_tune tune " in capsys.readouterr().out
    assert cli.main(["tune", "-P", "process"]) == 3  # a message that names a command names aot_tune's
    assert capsys.readouterr().err.startswith("ERROR: aot_tune tune runs its own worker processes")


def test_without_the_tune_extra_aot_tune_says_what_to_install(tmp_path):
    for code in (f"{WITHOUT_PIPELINE} from aot_tune.commands import main; raise SystemExit(main())",
                 f"{WITHOUT_PIPELINE} import runpy; runpy.run_module('aot_tune', run_name='__main__')"):
        proc = run(tmp_path, code, "tune", "-n", "2")
        assert proc.returncode == 3 and proc.stdout == "", proc.stderr
        line, = proc.stderr.splitlines()
        assert line.startswith("ERROR: ") and "tune needs aot_tune's tuning pipeline" in line, line
        assert line.endswith(f"fix: {INSTALL}") and "no module yaml, jinja2, google.protobuf" in line


def test_without_the_tune_extra_doit_runs_other_projects_and_says_what_to_install_for_ours(tmp_path):
    """pip registers aot_tune's doit plugins with or without the extra: doit must still load them."""
    doit = (f"{WITHOUT_PIPELINE}\n{INSTALLED}\nfrom doit.doit_cmd import DoitMain\n"
            f"raise SystemExit(DoitMain().run(sys.argv[1:]))")
    (tmp_path / "dodo.py").write_text("def task_hello():\n    return {'actions': ['echo hi']}\n")
    listed = run(tmp_path, doit, "list")  # `list` is aot_tune's plugin: doit's own list in a dodo project
    assert listed.returncode == 0 and listed.stdout.split() == ["hello"], listed.stderr
    helped = run(tmp_path, doit, "help")
    assert helped.returncode == 0 and f"(not installed: {INSTALL})" in helped.stdout, helped.stderr
    project = tmp_path / "tuned"
    project.mkdir()
    (project / "tuning.yaml").write_text("version: 1\n")
    for args in (["tune", "--dry-run"], ["check"], ["list"]):
        proc = run(project, doit, *args)
        assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr
        line, = proc.stderr.splitlines()
        assert line.startswith(f"ERROR: doit {args[0]} needs aot_tune's tuning pipeline") and INSTALL in line
