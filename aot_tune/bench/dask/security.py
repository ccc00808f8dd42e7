"""Who may talk to the cluster: the transport rules a bench run and the worker launcher follow.

Anyone who reaches a Dask scheduler or worker over plain TCP can run code on the workers
(``Client(addr).run(...)``) and hand the tuning host pickles to load. Loopback is no boundary:
every user of a shared host reaches it. So a cluster is reached over ``tls://`` with a CA and a
certificate (Dask's ``Security``), and plain TCP only when the user says everyone who can reach
it is trusted (``--insecure-tcp``), with a warning. Importing this module does not import Dask.
"""
from __future__ import annotations

import ipaddress
import json
import os
import sys
from dataclasses import dataclass

from aot_tune.errors import TuneError

LOOPBACK_NAMES = ("localhost",)
#: How the user gives one side's certificates (doit tune and the worker launcher alike).
TLS_OPTIONS = "--tls-ca-file, --tls-cert and --tls-key (the cluster's CA, this host's certificate and key)"


@dataclass(frozen=True)
class TlsFiles:
    """The CA file, certificate and private key (PEM) of one side of a TLS cluster."""

    ca_file: str
    cert: str
    key: str

    @classmethod
    def of(cls, ca_file: str = "", cert: str = "", key: str = "", *, where: str = "doit tune") -> "TlsFiles | None":
        """The three files, or None when none is given; some but not all is an error."""
        given = {"--tls-ca-file": ca_file, "--tls-cert": cert, "--tls-key": key}
        if not any(given.values()):
            return None
        missing = [name for name, value in given.items() if not value]
        if missing:
            raise TuneError(f"{where}: TLS needs --tls-ca-file, --tls-cert and --tls-key together; fix: add "
                            f"{', '.join(missing)}")
        for name, value in given.items():
            if not os.path.isfile(value):
                raise TuneError(f"{where}: {name} {value} is not a file; fix: pass the path of a PEM file")
        return cls(ca_file, cert, key)

    def security(self, role: str = "client"):
        """Dask's ``Security`` for ``role`` (client or worker), encryption required."""
        from distributed.security import Security

        return Security(tls_ca_file=self.ca_file, require_encryption=True,
                        **{f"tls_{role}_cert": self.cert, f"tls_{role}_key": self.key})

    def cli_args(self) -> list[str]:
        """The same files as the options of ``dask scheduler``, ``dask worker`` and the launcher."""
        return ["--tls-ca-file", self.ca_file, "--tls-cert", self.cert, "--tls-key", self.key]


def scheduler_address(target: str) -> str:
    """The scheduler's address: ``target`` itself, or the address its scheduler file holds."""
    if not os.path.isfile(target):
        return target
    try:
        with open(target) as handle:
            address = json.load(handle)["address"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TuneError(f"cannot read the scheduler's address from the scheduler file {target} "
                        f"({type(exc).__name__}); fix: pass the file `dask scheduler --scheduler-file` wrote") from None
    return str(address)


def split_address(address: str) -> tuple[str, str]:
    """(scheme, host) of a Dask address; a bare ``host:port`` is tcp, as in Dask."""
    scheme, _, rest = address.rpartition("://")
    scheme = scheme or "tcp"
    host = rest.rsplit("/", 1)[0]
    if host.startswith("["):  # [::1]:8786
        host = host[1:host.find("]")]
    elif host.count(":") == 1:
        host = host.split(":")[0]
    return scheme.lower(), host


def is_loopback(host: str) -> bool:
    """True for localhost, 127.0.0.0/8 and ::1 written literally (no name is looked up)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_transport(target: str, tls: TlsFiles | None, insecure_tcp: bool, *, fix_tls: str) -> str:
    """The scheduler's address, once it is safe to connect to it: tls:// with certificates, or
    plain TCP (loopback included) with ``insecure_tcp``. Raises a one-line TuneError otherwise;
    ``fix_tls`` names the options that give the certificates. Nothing is contacted."""
    address = scheduler_address(target)
    scheme, host = split_address(address)
    if scheme == "tls":
        if tls is None:
            raise TuneError(f"the Dask scheduler at {address} speaks TLS but no certificates were given; "
                            f"fix: pass {fix_tls}")
        return address
    if tls is not None:
        raise TuneError(f"TLS certificates were given but the Dask scheduler at {address} is plain {scheme}; "
                        f"fix: start it with TLS (dask scheduler --tls-ca-file ... --tls-cert ... --tls-key ...) "
                        f"and use its tls:// address")
    if not insecure_tcp:
        who = "any user of this host" if is_loopback(host) else "anyone on the network"
        raise TuneError(f"refusing plain {scheme} to the Dask scheduler at {address}: {who} can connect to it or "
                        f"a worker and run code on the workers and on this host; fix: use tls:// with {fix_tls}, "
                        f"or pass --insecure-tcp if everyone who can reach it is trusted")
    return address


def warn_if_plain(address: str) -> None:
    """One line on stderr before connecting over plain TCP (allowed by ``--insecure-tcp``)."""
    scheme = split_address(address)[0]
    if scheme != "tls":
        print(f"aot_tune: warning: plain {scheme} to the Dask scheduler at {address} (--insecure-tcp): "
              f"nothing is encrypted or authenticated; whoever reaches it or a worker can run code on the "
              f"workers and on this host", file=sys.stderr, flush=True)
