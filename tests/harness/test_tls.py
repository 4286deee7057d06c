"""HTTPS against a local server with a self-signed certificate: a CA bundle, insecure, neither.

The pre-flight check and the sweep share the connection code, so both are checked here.
"""

import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.mock_server import MockConfig, ThreadedMockServer
from harness.records import RequestRecord
from harness.run import aio
from harness.run.workload import payload
from harness.wire import target
from harness.wire.client import Clock, ConnectionPool, build_request, stream_completion
from harness.wire.endpoint import Endpoint

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl binary")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, made fresh (the `cryptography` package is not
    a dependency; the openssl binary is)."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", "/CN=engram-bench test", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    return cert, key


@pytest.fixture
def tls_server(certificate: tuple[Path, Path]) -> Iterator[ThreadedMockServer]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    with ThreadedMockServer(MockConfig(ttft_ms=1, itl_ms=1), ssl=context) as server:
        yield server


def stream(endpoint: Endpoint, connect_timeout: float = 10.0) -> RequestRecord:
    async def main() -> RequestRecord:
        pool = ConnectionPool(endpoint, connect_timeout)
        body = payload("chat", "mock-model", "Hello.", 4, 0.0)
        record = await stream_completion(pool, build_request(endpoint, body, "r"),
                                         RequestRecord("r", 1, 0, 0, 0.0), Clock(), 10.0)
        pool.close()
        return record

    return aio.run(main())


def test_trusted_through_the_ca_bundle(tls_server, certificate):
    ep = Endpoint(tls_server.url, ca_bundle=certificate[0])
    assert tls_server.url.startswith("https://127.0.0.1:")
    assert aio.run(target.describe(ep, None)).model == "mock-model"
    rec = stream(ep)
    assert rec.ok and rec.output_tokens == 4


def test_untrusted_without_it_is_a_clear_connect_error(tls_server):
    ep = Endpoint(tls_server.url)
    rec = stream(ep)
    assert rec.error_kind == "connect_error"
    assert rec.error_message.startswith("TLS certificate verification failed: ")
    assert "self-signed" in rec.error_message or "self signed" in rec.error_message
    with pytest.raises(target.TargetError, match="TLS certificate verification failed"):
        aio.run(target.describe(ep, None))


def test_insecure_skips_the_checks(tls_server):
    ep = Endpoint(tls_server.url, insecure=True)
    assert aio.run(target.describe(ep, None)).model == "mock-model"
    assert stream(ep).ok


def test_https_to_a_silent_plain_http_port_names_the_likely_cause():
    """A plain HTTP server waits for a request head the TLS hello never completes: that was
    reported as a bare connect timeout."""
    with ThreadedMockServer(MockConfig()) as plain:
        ep = Endpoint(plain.url.replace("http://", "https://"))
        rec = stream(ep, connect_timeout=0.5)
        assert rec.error_kind == "connect_timeout"
        assert "accepted the connection but did not answer the TLS handshake within 0.5 s" in (
            rec.error_message)
        assert rec.error_message.endswith("use an http:// URL")
        with pytest.raises(target.TargetError, match="did not answer the TLS handshake"):
            aio.run(target.describe(ep, None, timeout_s=0.5))


@pytest.fixture
def answers_in_plain_http() -> Iterator[int]:
    """A port whose server answers anything, a TLS hello included, with a plain HTTP 400 (as
    uvicorn does)."""
    sock = socket.create_server(("127.0.0.1", 0))
    sock.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
                             b"Connection: close\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    stop.set()
    thread.join(5)
    sock.close()


def test_https_to_a_port_that_answers_plain_http_says_it_is_not_tls(answers_in_plain_http):
    ep = Endpoint(f"https://127.0.0.1:{answers_in_plain_http}/v1")
    rec = stream(ep)
    assert rec.error_kind == "connect_error"
    assert rec.error_message.startswith(f"127.0.0.1:{answers_in_plain_http} (https) does not "
                                        "speak TLS")  # it was OpenSSL's "wrong version number"
    assert rec.error_message.endswith("use an http:// URL")
