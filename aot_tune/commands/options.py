"""Command-line options the commands share, and the one-run-per-tree lock."""
from __future__ import annotations

import fcntl
import getopt
import os
import re
from pathlib import Path

from doit.cmdparse import CmdParseError
from doit.exceptions import InvalidCommand

from aot_tune.bench.local.detect import BACKENDS
from aot_tune.build.deadline import CompileDeadline
from aot_tune.errors import program, set_program, shorten

#: doit's database, relative to the manifest's folder (sqlite3: one file, safe with threads).
DOIT_DB = ".aot_tune/doit.sqlite3"

opt_manifest = {
    "name": "manifest", "long": "manifest", "type": str, "default": "tuning.yaml",
    "help": "path of the tuning manifest [default: %(default)s]",
}

opt_backend = {
    "name": "bench_backend", "long": "bench-backend", "type": str, "default": "auto",
    "help": f"where to benchmark: {', '.join(BACKENDS)} (auto: cuda when a GPU is visible) [default: %(default)s]",
}

EXECUTORS = ("local", "dask")
opt_executor = {
    "name": "executor", "long": "executor", "type": str, "default": "local",
    "help": "where the bench stage runs: local (a worker per local GPU) or dask (the GPUs of the Dask "
            "cluster at --scheduler, every GPU model it has) [default: %(default)s]",
}

opt_scheduler = {
    "name": "scheduler", "long": "scheduler", "type": str, "default": "",
    "help": "with --executor dask: the scheduler's address (tls://host:8786) or scheduler file",
}

opt_tls_ca_file = {
    "name": "tls_ca_file", "long": "tls-ca-file", "type": str, "default": "",
    "help": "with a tls:// scheduler: the CA certificate(s) the cluster's certificates are signed by (PEM)",
}

opt_tls_cert = {
    "name": "tls_cert", "long": "tls-cert", "type": str, "default": "",
    "help": "with a tls:// scheduler: this host's certificate (PEM)",
}

opt_tls_key = {
    "name": "tls_key", "long": "tls-key", "type": str, "default": "",
    "help": "with a tls:// scheduler: the private key of --tls-cert (PEM)",
}

opt_insecure_tcp = {
    "name": "insecure_tcp", "long": "insecure-tcp", "type": bool, "default": False,
    "help": "with --executor dask: accept a plain tcp:// scheduler, loopback included, with a warning (anyone "
            "reaching it or a worker can run code on the workers and on this host: only if all of them are trusted)",
}

opt_worker_wait = {
    "name": "worker_wait", "long": "worker-wait", "type": float, "default": 60.0,
    "help": "with --executor dask: seconds to wait for a bench worker of a device model before "
            "its bench tasks fail [default: %(default)s]",
}

opt_compile_deadline = {
    "name": "compile_deadline", "long": "compile-deadline", "type": float, "default": CompileDeadline.factor,
    "help": f"give up a compile that runs this many times longer than the median valid compile of its kernel "
            f"and target in this run (at least {CompileDeadline.min_s:g} s, after {CompileDeadline.peers} such "
            f"compiles): it is recorded as timeout, never chosen; 0: no deadline [default: %(default)s]",
}


class HelpOption:
    """Mixed in before doit's Command class of every aot_tune command: ``<command> --help`` prints
    the command's help, as ``doit help <command>`` does (doit itself would reject the option); the
    program the user typed (``aot_tune``, ``doit``) names the commands messages suggest; and a
    command line doit cannot parse is one line naming the option, not doit's dump of every option."""

    def parse_execute(self, in_args):
        set_program(typed_program(self.bin_name))
        if "--help" in in_args:
            print(self.help())
            return 0
        try:
            return super().parse_execute(in_args)
        except CmdParseError as err:
            raise InvalidCommand(self.parse_problem(in_args, err)) from None

    def parse_problem(self, in_args: list[str], err: CmdParseError) -> str:
        """``aot_tune tune: unknown option --dry-run; see aot_tune tune --help``"""
        where = f"{program()} {self.name}"
        see = f"see {where} --help"
        try:
            getopt.getopt(in_args, self.cmdparser.get_short(), self.cmdparser.get_long())
        except getopt.GetoptError as bad:
            option = shorten(("--" if len(bad.opt) > 1 else "-") + bad.opt, 60)
            for words, problem in _GETOPT_PROBLEMS.items():
                if words in bad.msg:
                    return f"{where}: {problem.format(option)}; {see}"
            return f"{where}: {shorten(' '.join(bad.msg.split()))}; {see}"
        named = re.search(r"parameter '(\w+)'", str(err))  # a value doit could not convert or check
        if named and named.group(1) in self.cmdparser:
            option = self.cmdparser[named.group(1)]
            shown = "/".join(f for f in (f"--{option.long}" if option.long else "",
                                         f"-{option.short}" if option.short else "") if f)
            detail = " ".join(str(err).split(".", 1)[-1].split())
            return f"{where}: bad value for {shown or option.name}: {shorten(detail)}; {see}"
        return f"{where}: {shorten(' '.join(str(err).split()))}; {see}"


#: getopt's wording -> ours.
_GETOPT_PROBLEMS = {
    "not recognized": "unknown option {}",
    "requires argument": "option {} needs a value",
    "must not have an argument": "option {} takes no value",
    "not a unique prefix": "option {} is ambiguous (write it in full)",
}


def typed_program(bin_name: str) -> str:
    """The program a command line ran: ``python -m doit`` calls itself ``-m``, which is ``doit``."""
    return bin_name if bin_name and not bin_name.startswith("-") and bin_name != "__main__.py" else "doit"


class exclusive_run:
    """One ``doit tune`` per tree at a time: a second one refuses instead of racing the first."""

    def __init__(self, work_dir: Path) -> None:
        self.path = work_dir / "run.lock"
        self.handle = None

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = open(self.path, "a+")
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.handle.seek(0)
            holder = self.handle.read().strip() or "another process"
            self.handle.close()
            raise InvalidCommand(f"another {program()} tune is running in this tree ({holder}); "
                                 f"wait for it to finish, then run again") from None
        self.handle.seek(0)
        self.handle.truncate()
        self.handle.write(f"pid {os.getpid()}")
        self.handle.flush()
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()
        return False
