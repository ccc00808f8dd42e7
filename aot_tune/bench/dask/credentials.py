"""Throwaway TLS credentials for one local cluster: a fresh CA and one certificate and key signed
by it, which the scheduler, the workers and the cluster's clients all present.

Dask's ``Security.temporary()`` makes such credentials in memory, but ``dask scheduler`` and the
worker launcher are separate processes that take files, so they are written as PEM files into a
folder only the owner can enter (files mode 0600). They are made with the ``cryptography``
package when it is importable (in process; Dask's own ``temporary()`` needs it too) and
otherwise with the ``openssl`` command, present on nearly every host (Debian's ca-certificates
depends on it): neither is a dependency of ``distributed``, so either serves.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
import shutil
import subprocess
from pathlib import Path

from aot_tune.bench.dask.security import TlsFiles
from aot_tune.errors import TuneError

#: Long enough for any run; a stopped cluster's files are removed, and a new cluster has a new CA.
DAYS = 30
CA_NAME = "aot_tune local cluster CA"
NAME = "aot_tune local cluster"


def make_credentials(folder: Path, *, backend: str = "auto") -> TlsFiles:
    """A new CA (``ca.pem``) and a certificate and key (``cluster.pem``, ``cluster.key``) signed by
    it, in ``folder`` (created mode 0700; any earlier files there are replaced). ``backend``:
    auto, cryptography or openssl."""
    folder = Path(folder)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    if backend == "auto":
        try:
            import cryptography  # noqa: F401
            backend = "cryptography"
        except ImportError:
            backend = "openssl" if shutil.which("openssl") else ""
    if backend == "cryptography":
        _with_cryptography(folder)
    elif backend == "openssl":
        _with_openssl(folder)
    else:
        raise TuneError("the local Dask cluster needs TLS credentials but neither the cryptography package nor "
                        "the openssl command is here to make them; fix: pip install cryptography (or install openssl)")
    files = TlsFiles(str(folder / "ca.pem"), str(folder / "cluster.pem"), str(folder / "cluster.key"))
    for path in (*folder.iterdir(),):
        os.chmod(path, 0o600)
    return files


def _with_cryptography(folder: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def certificate(name: str, key, issuer: str, issuer_key, ca: bool):
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=DAYS))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                                  critical=False))
        if ca:
            usage = dict(digital_signature=False, key_cert_sign=True, crl_sign=True)
        else:
            usage = dict(digital_signature=True, key_cert_sign=False, crl_sign=False)
            builder = (builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                                    ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                       .add_extension(x509.SubjectAlternativeName([
                           x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                           x509.IPAddress(ipaddress.ip_address("::1"))]), critical=False))
        builder = builder.add_extension(x509.KeyUsage(content_commitment=False, key_encipherment=False,
                                                      data_encipherment=False, key_agreement=False,
                                                      encipher_only=False, decipher_only=False, **usage),
                                        critical=True)
        return builder.sign(issuer_key, hashes.SHA256())

    def write(path: Path, data: bytes) -> None:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    pem = serialization.Encoding.PEM
    write(folder / "ca.pem", certificate(CA_NAME, ca_key, CA_NAME, ca_key, True).public_bytes(pem))
    write(folder / "cluster.pem", certificate(NAME, key, CA_NAME, ca_key, False).public_bytes(pem))
    write(folder / "cluster.key", key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
    # The CA's key is never written: nothing more is signed by it.


#: The openssl commands' own configuration, so the system's openssl.cnf is not needed.
OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[leaf]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:localhost, IP:127.0.0.1, IP:::1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


def _with_openssl(folder: Path) -> None:
    config, csr, ca_key = folder / "openssl.cnf", folder / "cluster.csr", folder / "ca.key"
    config.write_text(OPENSSL_CONFIG)
    newkey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-config", str(config)]
    commands = [
        ["req", "-x509", *newkey, "-extensions", "ca", "-days", str(DAYS), "-subj", f"/CN={CA_NAME}",
         "-keyout", str(ca_key), "-out", str(folder / "ca.pem")],
        ["req", "-new", *newkey, "-subj", f"/CN={NAME}", "-keyout", str(folder / "cluster.key"), "-out", str(csr)],
        ["x509", "-req", "-in", str(csr), "-CA", str(folder / "ca.pem"), "-CAkey", str(ca_key),
         "-set_serial", f"0x{secrets.token_hex(16)}", "-days", str(DAYS), "-extfile", str(config),
         "-extensions", "leaf", "-out", str(folder / "cluster.pem")],
    ]
    try:
        for command in commands:
            done = subprocess.run(["openssl", *command], capture_output=True, text=True, timeout=60)
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no message"])[-1]
                raise TuneError(f"openssl {command[0]} failed making the local cluster's TLS credentials ({last}); "
                                f"fix: pip install cryptography, which is used instead when present")
    finally:
        for path in (config, csr, ca_key):  # nothing more is signed by the CA
            path.unlink(missing_ok=True)
