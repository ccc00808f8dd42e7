"""Who can reach the bench cluster: the local cluster speaks TLS with throwaway credentials and
listens on loopback only with no dashboard, plain TCP to a scheduler (loopback included) is
refused before anything is contacted unless the user opts in, and a TLS cluster works end to
end. Only loopback addresses are ever contacted here."""
from __future__ import annotations

import datetime
import gc
import ipaddress
import os
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request

import pytest
from tunerun import make_project, subprocess_env, tune, vector_add_manifest

from aot_tune.bench.dask import credentials
from aot_tune.bench.dask.credentials import make_credentials
from aot_tune.bench.dask.security import TlsFiles, check_transport, is_loopback, split_address
from aot_tune.errors import TuneError

pytest.importorskip("distributed")

#: Never contacted: every test refuses it, or fakes the connect, before a packet could leave.
REMOTE = "tcp://10.255.255.1:8786"
MANIFEST = vector_add_manifest("    space:\n      BLOCK_SIZE: [256]\n    shapes:\n      - {n: 4096}\n"
                               "    dtypes: [float16]\n")


def cluster_pids(dask) -> set[int]:
    psutil = pytest.importorskip("psutil")
    launcher = psutil.Process(dask.launcher.pid)
    return {dask.scheduler.pid, launcher.pid} | {p.pid for p in launcher.children(recursive=True)}


def listening(pids: set[int]) -> list[tuple[str, int]]:
    psutil = pytest.importorskip("psutil")
    try:
        connections = psutil.net_connections("inet")
    except psutil.AccessDenied:
        pytest.skip("psutil cannot list this machine's sockets here (access denied)")
    return [(c.laddr.ip, c.laddr.port) for c in connections if c.status == psutil.CONN_LISTEN and c.pid in pids]


def http_status(url: str) -> int:
    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only, never a proxy
        with opener.open(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


# -- the transport rules (nothing contacted) --------------------------------------------------------
@pytest.mark.parametrize("address, expected", [
    ("tcp://127.0.0.1:8786", ("tcp", "127.0.0.1")), ("127.0.0.2:8786", ("tcp", "127.0.0.2")),
    ("tls://[::1]:8786", ("tls", "::1")), ("tcp://localhost:8786", ("tcp", "localhost")),
    (REMOTE, ("tcp", "10.255.255.1")), ("tcp://gpu-head", ("tcp", "gpu-head"))])
def test_addresses_split_into_scheme_and_host(address, expected):
    assert split_address(address) == expected


def test_only_literal_loopback_addresses_are_loopback():
    assert all(map(is_loopback, ["127.0.0.1", "127.9.9.9", "::1", "localhost", "LOCALHOST"]))
    assert not any(map(is_loopback, ["10.255.255.1", "0.0.0.0", "::", "gpu-head", "localhost.example.com"]))


def test_plain_tcp_to_another_host_is_refused_with_one_line(tmp_path):
    with pytest.raises(TuneError) as refused:
        check_transport(REMOTE, None, False, fix_tls="--tls-*")
    message = str(refused.value)
    assert "\n" not in message and REMOTE in message and "tls://" in message and "--insecure-tcp" in message
    scheduler_file = tmp_path / "scheduler.json"  # judged by the address it holds
    scheduler_file.write_text('{"address": "%s"}' % REMOTE)
    with pytest.raises(TuneError, match="refusing plain tcp"):
        check_transport(str(scheduler_file), None, False, fix_tls="--tls-*")
    assert check_transport(REMOTE, None, True, fix_tls="--tls-*") == REMOTE


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:8786", "localhost:8786", "tcp://[::1]:8786"])
def test_plain_tcp_on_loopback_is_refused_too_unless_opted_in(address):
    """Every user of a shared host reaches loopback."""
    with pytest.raises(TuneError) as refused:
        check_transport(address, None, False, fix_tls="--tls-*")
    message = str(refused.value)
    assert "\n" not in message and "any user of this host" in message and "fix: use tls://" in message
    assert "--insecure-tcp" in message
    assert check_transport(address, None, True, fix_tls="--tls-*") == address


def test_tls_needs_all_three_files_and_a_tls_address(tmp_path):
    pem = tmp_path / "x.pem"
    pem.write_text("")
    with pytest.raises(TuneError, match="add --tls-key"):
        TlsFiles.of(str(pem), str(pem), "")
    with pytest.raises(TuneError, match="is not a file"):
        TlsFiles.of(str(pem), str(pem), str(tmp_path / "missing.key"))
    files = TlsFiles.of(str(pem), str(pem), str(pem))
    with pytest.raises(TuneError, match="speaks TLS but no certificates"):
        check_transport("tls://10.255.255.1:8786", None, False, fix_tls="--tls-*")
    with pytest.raises(TuneError, match="use its tls:// address"):
        check_transport("tcp://127.0.0.1:8786", files, False, fix_tls="--tls-*")
    assert check_transport("tls://10.255.255.1:8786", files, False, fix_tls="--tls-*")


def test_doit_tune_refuses_plain_tcp_to_another_host_before_connecting(tmp_path):
    project = make_project(tmp_path, MANIFEST)
    proc = tune(project, "--executor", "dask", "--scheduler", REMOTE, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"refusing plain tcp to the Dask scheduler at {REMOTE}" in proc.stderr
    assert "--insecure-tcp" in proc.stderr and "--tls-ca-file" in proc.stderr


def test_insecure_tcp_lets_a_remote_address_through_to_the_connect(monkeypatch):
    """The connect itself is faked: the test contacts nothing."""
    import distributed

    from aot_tune.bench.dask.client import ClusterDevices

    tried = []

    def refuse(**kwargs):
        tried.append(kwargs)
        raise OSError("faked: not contacted")

    monkeypatch.setattr(distributed, "Client", refuse)
    with pytest.raises(TuneError, match="refusing plain tcp"):
        ClusterDevices(REMOTE, insecure_tcp=False)
    assert tried == []
    with pytest.raises(TuneError, match="cannot reach the Dask scheduler"):
        ClusterDevices(REMOTE, insecure_tcp=True)
    assert [t["address"] for t in tried] == [REMOTE]


def test_plain_tcp_on_loopback_is_refused_by_doit_tune_and_warned_of_with_the_opt_in(tmp_path, monkeypatch, capsys):
    project = make_project(tmp_path, MANIFEST)
    refused = tune(project, "--executor", "dask", "--scheduler", "tcp://127.0.0.1:1", check=False)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "refusing plain tcp to the Dask scheduler at tcp://127.0.0.1:1" in refused.stderr
    assert "--insecure-tcp" in refused.stderr and "--tls-ca-file" in refused.stderr

    import distributed

    from aot_tune.bench.dask.client import ClusterDevices

    def refuse(**kwargs):  # faked: the test contacts nothing
        raise OSError("faked: not contacted")

    monkeypatch.setattr(distributed, "Client", refuse)
    capsys.readouterr()
    with pytest.raises(TuneError, match="cannot reach the Dask scheduler"):
        ClusterDevices("tcp://127.0.0.1:1", insecure_tcp=True)
    (warning,) = capsys.readouterr().err.strip().splitlines()
    assert "warning: plain tcp to the Dask scheduler at tcp://127.0.0.1:1 (--insecure-tcp)" in warning


def test_the_worker_launcher_refuses_plain_tcp_and_a_remote_scheduler_without_a_host():
    def launch(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "aot_tune.bench.dask", "worker", *args, "--interpreter", "1"],
                              env=subprocess_env(), capture_output=True, text=True, timeout=60)

    for address in (REMOTE, "tcp://127.0.0.1:1"):
        plain = launch(address)
        assert plain.returncode != 0 and "refusing plain tcp" in plain.stderr and "Traceback" not in plain.stderr
    hostless = launch(REMOTE, "--insecure-tcp")
    assert hostless.returncode != 0 and "fix: pass --host" in hostless.stderr
    assert len(hostless.stderr.strip().splitlines()) == 1


# -- a local cluster ------------------------------------------------------------------------------
def strangers_cannot_connect(address: str, other_ca: TlsFiles) -> None:
    """A Client without the cluster's credentials fails, quickly, three ways: no certificates,
    plain TCP to the TLS port, and certificates of another CA."""
    port = address.rsplit(":", 1)[1]
    for target, extra in ((address, {}), (f"tcp://127.0.0.1:{port}", {}),
                          (address, {"security": other_ca.security("client")})):
        began = time.monotonic()
        with pytest.raises((TypeError, OSError, TimeoutError)):  # no SSL context, reset, wrong certificate
            stranger(target, extra)
        assert time.monotonic() - began < 45, target
        gc.collect()  # the failed Client's close, now: see ``stranger``


def stranger(target: str, extra: dict) -> None:
    """A Client's attempt on ``target``. Before it connects, distributed starts the Client's own
    IO loop in a thread and gives up on it after 10 s with a bare AssertionError: that happened
    twice in this suite's full runs on a 2-core CPU (never in this test alone), with nothing
    contacted yet, so that one failure is tried again, twice at most.

    A Client that fails to connect is closed by its ``__del__``, whenever the garbage collector
    gets to it (its traceback holds it in a cycle). When that was inside the next Client's start,
    its close waited for a lock that start held, and the test process hung (a CI run, two test
    files at a time). So a failed attempt is collected before the next one, and the caller
    collects after each ``stranger``."""
    from distributed import Client

    for attempt in range(3):
        try:
            with Client(target, timeout=3, set_as_default=False, **extra) as client:
                client.run(os.getpid)  # never reached
            return
        except AssertionError as err:
            started = [frame.name for frame in traceback.extract_tb(err.__traceback__)]
            if "_start_unlocked" not in started or attempt == 2:
                raise
        gc.collect()


def test_the_local_cluster_speaks_tls_on_loopback_only_with_no_dashboard(tmp_path, certificates):
    from aot_tune.bench.dask.local import LocalCluster

    folder = tmp_path / "cluster"
    with LocalCluster(folder, interpreter=1, env=subprocess_env(), name="s") as dask:
        with dask.client() as client:
            info = client.scheduler_info(n_workers=-1)
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [folder / "tls", *(folder / "tls").iterdir()]}
        strangers_cannot_connect(info["address"], certificates)
        sockets = listening(cluster_pids(dask))
        ports = [info["services"]["dashboard"], *(w["services"]["dashboard"] for w in info["workers"].values())]
        statuses = [http_status(f"http://127.0.0.1:{port}/status") for port in ports]
        assert dask.tune_args() == ["--scheduler", str(dask.scheduler_file), *dask.tls.cli_args()]
    assert not (folder / "tls").exists()  # the throwaway credentials go with the cluster
    assert modes == {"tls": 0o700, "ca.pem": 0o600, "cluster.pem": 0o600, "cluster.key": 0o600}
    assert info["address"].startswith("tls://127.0.0.1:")
    assert [a.split("://")[0] for a in info["workers"]] == ["tls"]
    assert split_address(info["address"])[1] == "127.0.0.1"
    assert [split_address(a)[1] for a in info["workers"]] == ["127.0.0.1"]
    assert sockets and all(is_loopback(ip) for ip, _ in sockets), sockets
    # Dask's HTTP endpoints (health, metrics) remain, on loopback, but serve no dashboard.
    assert len(ports) == 2 and 8787 not in ports and set(ports) <= {port for _, port in sockets}
    assert statuses == [404, 404]


# -- TLS ------------------------------------------------------------------------------------------
def handshake(files: TlsFiles) -> str:
    """The peer's common name after a TLS handshake both ways, with Dask's checks (and strict X.509)."""
    def context(purpose):
        ctx = ssl.create_default_context(purpose=purpose, cafile=files.ca_file)
        ctx.load_cert_chain(files.cert, files.key)
        ctx.verify_mode, ctx.check_hostname = ssl.CERT_REQUIRED, False
        ctx.verify_flags |= getattr(ssl, "VERIFY_X509_STRICT", 0)
        return ctx

    left, right = socket.socketpair()
    server = context(ssl.Purpose.CLIENT_AUTH).wrap_socket(left, server_side=True, do_handshake_on_connect=False)
    client = context(ssl.Purpose.SERVER_AUTH).wrap_socket(right, do_handshake_on_connect=False)
    thread = threading.Thread(target=server.do_handshake)
    thread.start()
    client.do_handshake()
    thread.join()
    name = dict(pair[0] for pair in client.getpeercert()["subject"])["commonName"]
    client.close()
    server.close()
    return name


@pytest.mark.parametrize("backend", ["cryptography", "openssl"])
def test_throwaway_credentials_are_a_ca_and_a_certificate_it_signed(tmp_path, backend):
    if backend == "cryptography":
        pytest.importorskip("cryptography")
    elif shutil.which("openssl") is None:
        pytest.skip("no openssl command here")
    files = make_credentials(tmp_path / "tls", backend=backend)
    assert handshake(files) == credentials.NAME
    assert sorted(p.name for p in (tmp_path / "tls").iterdir()) == ["ca.pem", "cluster.key", "cluster.pem"]
    assert stat.S_IMODE((tmp_path / "tls").stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "tls").iterdir()} == {0o600}


def test_without_cryptography_or_openssl_the_credentials_are_one_line_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "cryptography", None)  # import fails
    monkeypatch.setattr(credentials.shutil, "which", lambda name: None)
    with pytest.raises(TuneError) as missing:
        make_credentials(tmp_path / "tls")
    assert "\n" not in str(missing.value) and "fix: pip install cryptography" in str(missing.value)


@pytest.fixture
def certificates(tmp_path) -> TlsFiles:
    """A throwaway self-signed CA certificate that also serves as every side's certificate."""
    folder = tmp_path / "tls"
    folder.mkdir()
    cert, key = folder / "cert.pem", folder / "key.pem"
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        if shutil.which("openssl") is None:
            pytest.skip("neither the cryptography package nor openssl is here to make a test certificate")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=aot-tune-test",
                        "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
        return TlsFiles(str(cert), str(cert), str(key))
    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "aot-tune-test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(private.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                  critical=False)
                   .sign(private, hashes.SHA256()))
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return TlsFiles(str(cert), str(cert), str(key))


def test_a_tls_local_cluster_is_reached_with_the_certificates_only(tmp_path, certificates):
    from aot_tune.bench.dask.client import ClusterDevices
    from aot_tune.bench.dask.local import LocalCluster
    from aot_tune.triton_compat import versions

    with LocalCluster(tmp_path / "cluster", interpreter=1, env=subprocess_env(), name="s", tls=certificates) as dask:
        with dask.client() as client:
            info = client.scheduler_info(n_workers=-1)
        assert info["address"].startswith("tls://127.0.0.1:")
        assert all(a.startswith("tls://127.0.0.1:") for a in info["workers"]) and len(info["workers"]) == 1
        with pytest.raises(TuneError, match="speaks TLS but no certificates"):
            ClusterDevices(str(dask.scheduler_file), worker_wait_s=10, log=lambda line: None)
        devices = ClusterDevices(str(dask.scheduler_file), worker_wait_s=10, log=lambda line: None, tls=certificates)
        try:
            (device,) = devices.discover(versions())
        finally:
            devices.close()
    assert device.key == "interpreter" and device.count == 1


def test_doit_tune_benches_on_a_tls_cluster(tmp_path, certificates):
    """A whole run (compile here, bench on the TLS cluster's interpreter worker) with the options."""
    from aot_tune.bench.dask.local import LocalCluster

    project = make_project(tmp_path / "project", MANIFEST)
    with LocalCluster(tmp_path / "cluster", interpreter=1, env=subprocess_env(), name="s", tls=certificates) as dask:
        run = tune(project, "--executor", "dask", "--scheduler", str(dask.scheduler_file), "-n", "1",
                   *certificates.cli_args(), check=False)
        started = dask.batches_started()
    assert run.returncode == 0, run.stdout + run.stderr
    assert "benchmarking on the Dask cluster at" in run.stderr and "1 x interpreter" in run.stderr
    assert [worker for worker, _ in started] == ["s-interpreter0"]
    assert (project / "generated" / "vector_add.py").exists()
