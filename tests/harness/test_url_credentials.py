"""Credentials never travel in a URL: `--url http://user:password@host/v1` is refused before
anything is stored, and neither such a password nor an `--api-key` lands in the results file,
the output, `summary --json` or any export."""

import subprocess

import pytest

from harness.wire.endpoint import Endpoint, EndpointError
from tests.helpers import ROOT, run_cli

USER, PASSWORD, API_KEY = "bench-user", "pw-7f3c91d2e5", "sk-key-4b8e2a6f90"


@pytest.mark.parametrize(("url", "shown"), [
    (f"http://{USER}:{PASSWORD}@127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    (f"https://{USER}:{PASSWORD}@h.example/v1", "https://h.example/v1"),
    (f"http://{USER}:{PASSWORD}@[::1]:8000/v1", "http://[::1]:8000/v1"),
    (f"http://{PASSWORD}@127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),  # a token as user
    (f"http://{USER}:p@ss:{PASSWORD}@h.example/v1", "http://h.example/v1"),  # an @ in it
    (f"http://{USER}:{PASSWORD}@h.example:port/v1", "http://h.example:port/v1"),
    (f"ftp://{USER}:{PASSWORD}@h.example/v1", "ftp://h.example/v1"),
    (f"{USER}:{PASSWORD}@h.example:8000/v1", "h.example:8000/v1"),  # no scheme
])
def test_a_url_with_credentials_is_refused_without_repeating_them(url, shown):
    with pytest.raises(EndpointError) as refused:
        Endpoint(url)
    message = str(refused.value)
    assert repr(shown) in message and "--api-key" in message, message
    assert PASSWORD not in message and USER not in message, message


@pytest.mark.parametrize("url", ["http://h.example/v1/a@b", "http://h.example/v1?key=a@b"])
def test_an_at_sign_after_the_host_is_no_credential(url):
    assert Endpoint(url).host == "h.example"


def _scan(texts: dict[str, bytes], secrets: tuple[str, ...]) -> list[tuple[str, str]]:
    """(where, secret) for each secret found in any of the texts."""
    return [(where, s) for where, text in texts.items() for s in secrets
            if s.encode() in text]


def test_a_credential_in_the_url_or_the_api_key_lands_nowhere(mock_process, tmp_path):
    url = mock_process()
    db = tmp_path / "bench.duckdb"
    sweep = ("--levels", "1", "--rounds", "2", "--output-tokens", "8", "--db", str(db))
    outputs: dict[str, bytes] = {}

    def cli(name: str, *args: str, env: dict | None = None) -> int:
        proc = run_cli(*args, env=env)
        outputs[f"{name} stdout"] = proc.stdout.encode()
        outputs[f"{name} stderr"] = proc.stderr.encode()
        return proc.returncode

    with_credentials = url.replace("http://", f"http://{USER}:{PASSWORD}@")
    refused = cli("credentials", "run", "--url", with_credentials, *sweep, "--json")
    assert refused == 2, outputs
    assert "--api-key" in outputs["credentials stderr"].decode()
    assert cli("api key", "run", "--url", url, "--api-key", API_KEY, *sweep,
               "--label", "keyed") == 0, outputs
    assert cli("env key", "run", "--url", url, *sweep, "--json",
               env={"OPENAI_API_KEY": API_KEY}) == 0, outputs
    assert cli("summary", "summary", "latest", "--db", str(db), "--json") == 0, outputs
    assert cli("summary text", "summary", "--db", str(db)) == 0, outputs
    for fmt in ("csv", "parquet"):
        out = tmp_path / f"export-{fmt}"
        assert cli(f"export {fmt}", "export", "--db", str(db), "--out", str(out),
                   "--format", fmt) == 0, outputs
        exported = sorted(p for p in out.rglob("*") if p.is_file())
        assert exported, fmt
        outputs.update({str(p): p.read_bytes() for p in exported})
    stored = sorted(p for p in tmp_path.iterdir() if p.is_file())  # the file, its WAL if any
    assert db in stored
    outputs.update({str(p): p.read_bytes() for p in stored})
    assert b"keyed" in outputs[str(db)] or any(b"keyed" in outputs[str(p)] for p in stored)
    assert _scan(outputs, (PASSWORD, USER, API_KEY)) == []
    assert b"127.0.0.1" in outputs[str(db)] or any(
        b"127.0.0.1" in outputs[str(p)] for p in stored)  # the scan reads the stored URL


def test_make_bench_passes_the_api_key_outside_the_echoed_command(tmp_path):
    """make echoes each command it runs: the key reaches engram-bench in its environment."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "engram-bench"  # says what it was given
    fake.write_text('#!/bin/sh\necho "argv: $*"\necho "key: $OPENAI_API_KEY"\n')
    fake.chmod(0o755)
    for stamp in (".stamp-core", ".stamp-report"):  # newer than pyproject.toml: no install
        (venv / stamp).touch()
    proc = subprocess.run(["make", "--no-print-directory", "bench", f"VENV={venv}",
                           "URL=http://127.0.0.1:9/v1", f"API_KEY={API_KEY}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    calls = [line for line in lines if line.startswith("argv: ")]  # the run, then its report
    keys = [line for line in lines if line.startswith("key: ")]
    echoed = [line for line in lines if line not in calls and line not in keys]
    assert echoed and calls and API_KEY not in "\n".join(echoed + calls), proc.stdout
    assert "--url http://127.0.0.1:9/v1" in calls[0]
    assert keys == [f"key: {API_KEY}"] * len(calls)
