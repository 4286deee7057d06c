"""What `--db` may name that is no results file of this version: a pipe, a SQLite file, a file
a newer engram-bench wrote, or one deleted while a run writes it. Each gets one sentence, and
opening none of them reaches the network."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

from engram_bench.cli import main
from explorer import data
from harness.records import RequestRecord
from harness.results.results_file import HEADER_WAIT_S
from harness.results.run_row import RunRow
from harness.results.store import Store, StoreError
from runners.lifecycle import free_port
from tests.harness.fixtures import make_records
from tests.helpers import ROOT, run_cli


@pytest.fixture
def store(tmp_path) -> Store:
    s = Store(tmp_path / "bench.duckdb")
    s.initialise()
    s.create_run(RunRow(run_id="run-a", model="m", levels=[1], rounds=1, output_tokens=128,
                        config=json.dumps({})))
    return s


@pytest.mark.parametrize("command", [
    ["run", "--url", "http://127.0.0.1:9/v1"], ["summary"], ["export"], ["explore"]])
def test_a_pipe_as_the_results_file_is_refused_at_once(tmp_path, command):
    fifo = tmp_path / "results.duckdb"
    os.mkfifo(fifo)
    extra = ["--port", str(free_port())] if command == ["explore"] else []
    done = run_cli(*command, "--db", str(fifo), *extra, timeout=60)  # before: waited forever
    assert done.returncode == 2, done.stderr
    assert f"{fifo} is not a regular file" in done.stderr and "Traceback" not in done.stderr


@pytest.fixture
def extension_repository(monkeypatch) -> list[bytes]:
    """Every DuckDB connection the code opens fetches extensions from a server on 127.0.0.1
    instead of DuckDB's (and keeps them in an empty folder): the requests it receives."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    requests: list[bytes] = []

    def answer() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                requests.append(conn.recv(4096))

    threading.Thread(target=answer, daemon=True).start()
    folder = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"no-extensions-{port}")
    connect = duckdb.connect

    def connect_here(database: str = ":memory:", read_only: bool = False,
                     config: dict | None = None) -> duckdb.DuckDBPyConnection:
        return connect(database, read_only=read_only, config={
            **(config or {}), "autoinstall_extension_repository": f"http://127.0.0.1:{port}",
            "custom_extension_repository": f"http://127.0.0.1:{port}",
            "extension_directory": folder})

    monkeypatch.setattr(duckdb, "connect", connect_here)
    yield requests
    listener.close()


def test_a_sqlite_file_is_refused_and_no_extension_is_fetched(tmp_path, store,
                                                              extension_repository, capsys):
    lite = tmp_path / "results.sqlite"
    with sqlite3.connect(lite) as con:
        con.execute("CREATE TABLE runs (run_id TEXT)")
    with pytest.raises(StoreError, match="is not a DuckDB results file"):
        Store(lite).runs()
    assert main(["summary", "--db", str(lite)]) == 2
    assert f"{lite} is not a DuckDB results file" in capsys.readouterr().err
    assert "is not a DuckDB results file" in (data.unreadable(lite) or "")
    # nor can a query on a results file's connection (a crafted view, say) load one
    with store.read_only() as con, pytest.raises(duckdb.Error):
        con.execute(f"SELECT * FROM sqlite_scan('{lite}', 'runs')").fetchall()
    assert extension_repository == []


def test_a_file_read_while_another_process_creates_it_is_waited_for(store, tmp_path):
    """DuckDB creates the file a moment before it writes the header: a reader that comes in
    between reads the runs once the header is there, not 'not a DuckDB results file'."""
    creating = tmp_path / "creating.duckdb"
    creating.touch()
    whole = store.path.read_bytes()

    def create() -> None:
        time.sleep(0.3)
        creating.write_bytes(whole)

    writer = threading.Thread(target=create)
    writer.start()
    try:
        assert [r.run_id for r in Store(creating).runs()] == ["run-a"]
    finally:
        writer.join()


def test_an_empty_file_no_one_writes_is_refused_after_the_wait(tmp_path, capsys):
    empty = tmp_path / "empty.duckdb"
    empty.touch()
    started = time.monotonic()
    assert main(["summary", "--db", str(empty)]) == 2
    assert time.monotonic() - started >= HEADER_WAIT_S
    assert f"{empty} is not a DuckDB results file" in capsys.readouterr().err


def test_a_file_a_newer_version_wrote_is_refused_and_left_as_it_is(store, capsys):
    with duckdb.connect(str(store.path)) as con:  # as a far newer engram-bench leaves it
        con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER); "
                    "DELETE FROM schema_version; INSERT INTO schema_version VALUES (1000000); "
                    "CREATE OR REPLACE VIEW turns AS SELECT 42 AS answer")
    for use in (Store(store.path).runs, Store(store.path).initialise):
        with pytest.raises(StoreError, match="written by a newer engram-bench"):
            use()
    assert main(["summary", "--db", str(store.path)]) == 2
    assert "newer engram-bench" in capsys.readouterr().err
    with duckdb.connect(str(store.path), read_only=True) as con:  # its views are its own
        assert con.execute("SELECT answer FROM turns").fetchall() == [(42,)]


@pytest.mark.parametrize(("table", "said"), [
    ("(version VARCHAR); INSERT INTO schema_version VALUES ('4')", "holds '4' (VARCHAR)"),
    ("(version DOUBLE); INSERT INTO schema_version VALUES (4.5)", "holds 4.5 (DOUBLE)"),
    ("(v INTEGER); INSERT INTO schema_version VALUES (4)", "has no column named version"),
])
def test_a_schema_version_that_is_no_whole_number_is_one_sentence(store, capsys, table, said):
    with duckdb.connect(str(store.path)) as con:  # as another tool, or a hand, left it
        con.execute(f"DROP TABLE schema_version; CREATE TABLE schema_version {table}")
    with pytest.raises(StoreError, match="its schema_version table"):
        Store(store.path).runs()
    assert main(["summary", "--db", str(store.path)]) == 2
    err = capsys.readouterr().err
    assert f"{store.path} is not a results file engram-bench can read" in err and said in err


@pytest.fixture
def read_only(tmp_path) -> Iterator[tuple[Path, Callable[[list[str]], list[str]]]]:
    """A folder, and what runs a command where it cannot be written: as root, whom a file's
    mode does not stop, the command in a mount namespace of its own with the folder
    bind-mounted read-only; else with the folder's and its files' modes read-only."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        yield folder, lambda command: [
            "sh", "-c", 'chmod 0444 "$0"/* && chmod 0555 "$0" && exec "$@"', str(folder),
            *command]
        folder.chmod(0o755)
        return
    mount = ['unshare', '-m', '--propagation', 'private', 'sh', '-c',
             'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"',
             str(folder)]
    if subprocess.run([*mount, "true"], capture_output=True).returncode != 0:
        pytest.skip("root here cannot mount a folder read-only in a namespace of its own")
    yield folder, lambda command: [*mount, *command]


def test_a_file_an_older_version_wrote_is_read_where_it_cannot_be_upgraded(read_only):
    """On a read-only mount `summary` reads it upgraded in memory, and leaves it as it is."""
    folder, unwritable = read_only
    db = folder / "old.duckdb"
    old = Store(db)
    old.initialise()
    old.create_run(RunRow(run_id="old", model="m", mode="closed", levels=[1], rounds=2,
                          output_tokens=4))
    old.write_requests("old", [RequestRecord(f"old-c1-r{r}-w0", 1, r, 0, 1.0e9 + r,
                                             ttft_ms=5.0, latency_ms=50.0, output_tokens=4)
                               for r in range(2)])
    with duckdb.connect(str(db)) as con:  # as an older version wrote it: no index either
        con.execute("DROP INDEX requests_unique_id")
        con.execute("ALTER TABLE requests DROP COLUMN repeat")
    before = db.read_bytes()
    touched = subprocess.run(unwritable(["touch", str(folder / "new")]), capture_output=True)
    assert touched.returncode != 0, "the folder can be written: the test tests nothing"
    done = subprocess.run(unwritable([sys.executable, "-m", "engram_bench", "summary", "--db",
                                      str(db), "--json"]),
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["run_id"] == "old" and summary["levels"][0]["requests"] == 2
    assert db.read_bytes() == before
    assert [p.name for p in folder.iterdir()] == ["old.duckdb"]


def test_a_write_to_a_deleted_file_is_refused_and_the_file_held_open_is_put_back(store):
    records = make_records(levels=(1,))
    store.write_requests("run-a", records[:1])
    with store.held_open():
        store.path.unlink()
        with pytest.raises(StoreError, match="was deleted or moved while in use"):
            store.write_requests("run-a", records[1:])
        assert not store.path.exists()  # no empty file in its place
        assert store.put_back()
    assert [r.request_id for r in Store(store.path).requests("run-a")] == [records[0].request_id]
    store.write_requests("run-a", records[1:])  # the file is the results file again
    assert len(Store(store.path).requests("run-a")) == len(records)


def test_every_duckdb_connection_the_product_opens_refuses_extensions():
    """A new `duckdb.connect` in the product's code must pass NO_EXTENSIONS, or the guard the
    tests above check would not hold for it."""
    unguarded = []
    for folder in ("common", "harness", "runners", "explorer", "engram_bench", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if "duckdb.connect(" in line and "NO_EXTENSIONS" not in line:
                    unguarded.append(f"{path.relative_to(ROOT)}:{number}")
    assert not unguarded, f"duckdb.connect without NO_EXTENSIONS: {unguarded}"
