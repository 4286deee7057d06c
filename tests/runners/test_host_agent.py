"""`engram-bench agent`: its figures against what the kernel says to the test itself, its
residency readers, and the inputs it refuses."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import mmap
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from common import proc_tree
from engram_bench.cli import main
from harness.results.host_sample import AGENT, HostSample, parse_host_sample
from runners.host_agent import block_devices, residency, system
from runners.host_agent.processes import parse_read_bytes, parse_status
from tests.helpers import ROOT, read_line, run_cli, start_agent

PAGE = residency.PAGE
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)

# Reads the first half of a file after dropping its cache (no readahead past what it reads),
# then takes orders on stdin: spawn a child that waits, end the last one spawned, or exit.
WORKLOAD = textwrap.dedent("""
    import os, subprocess, sys
    fd = os.open(sys.argv[1], os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    half, done = os.fstat(fd).st_size // 2, 0
    while done < half:
        done += len(os.pread(fd, min(1 << 16, half - done), done))
    kids = []
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "spawn":
            kids.append(subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                         stdin=subprocess.PIPE))
            print(kids[-1].pid, flush=True)
        elif line.strip() == "end":
            kid = kids.pop()
            kid.stdin.close()
            kid.wait()
            print("ended", flush=True)
""")


@contextlib.contextmanager
def _workload(table: Path) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen([sys.executable, "-c", WORKLOAD, str(table)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, bufsize=0)
    try:
        assert read_line(proc) == "ready"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _order(proc: subprocess.Popen, order: str) -> str:
    proc.stdin.write(order.encode() + b"\n")
    return read_line(proc)


def _scrape(url: str) -> HostSample:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return parse_host_sample(resp.read().decode())


def _own(pids: list[int]) -> dict[str, int]:
    """The test's own reading of the processes' /proc files, summed."""
    total: dict[str, int] = {"read_bytes": 0, "minor": 0, "major": 0}
    for pid in pids:
        stat = proc_tree.read_stat(pid)
        assert stat is not None
        total["minor"] += stat.minor_faults
        total["major"] += stat.major_faults
        total["read_bytes"] += parse_read_bytes(Path(f"/proc/{pid}/io").read_text()) or 0
        for key, value in parse_status(Path(f"/proc/{pid}/status").read_text()).items():
            total[key] = total.get(key, 0) + value
    return total


def _resident_pages(path: Path) -> int:
    """What mincore says to the test, on a mapping of its own (copy-on-write, never touched)."""
    size = path.stat().st_size
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as mm:
        view = (ctypes.c_char * size).from_buffer(mm)
        vector = ctypes.create_string_buffer(-(-size // PAGE))
        try:
            assert _libc.mincore(ctypes.addressof(view), size, vector) == 0
        finally:
            del view
        return sum(b & 1 for b in vector.raw)


def _table(tmp_path: Path, pages: int) -> Path:
    """A file of `pages` pages, written to storage, so its cache can be dropped."""
    path = tmp_path / "table.bin"
    with open(path, "wb") as f:
        f.write(os.urandom(pages * PAGE))
        f.flush()
        os.fsync(f.fileno())
    return path


def _checked_between(before: dict[str, int], got: float, after: dict[str, int], key: str):
    assert min(before[key], after[key]) <= got <= max(before[key], after[key]), key


def test_the_agent_serves_the_process_trees_own_proc_figures(tmp_path):
    table = _table(tmp_path, 512)
    on_disk = block_devices.disk_of(table.stat().st_dev) is not None
    with _workload(table) as work, start_agent("--pid", str(work.pid), "--table",
                                                str(table)) as (url, _, _):
        assert url.startswith("http://127.0.0.1:")  # loopback unless --host says otherwise
        child = int(_order(work, "spawn"))
        pids = [work.pid, child]
        before = _own(pids)
        sample = _scrape(url)
        after = _own(pids)
        assert sample.source == AGENT
        tree = sample.processes
        assert tree is not None and tree.alive == 2 and tree.ended == 0
        _checked_between(before, tree.minor_faults, after, "minor")
        _checked_between(before, tree.major_faults, after, "major")
        assert tree.read_bytes is not None
        _checked_between(before, tree.read_bytes, after, "read_bytes")
        for key in ("rss_anon", "rss_file", "rss_shmem", "locked", "pinned"):
            _checked_between(before, getattr(tree, f"{key}_bytes"), after, key)
        if on_disk:  # tmpfs reads nothing from storage
            assert tree.read_bytes >= 256 * PAGE

        # a member that ends: the agent goes on, its counts stay in the totals
        assert _order(work, "end") == "ended"
        later = _scrape(url)
        assert later.processes is not None
        assert (later.processes.alive, later.processes.ended) == (1, 1)
        assert later.processes.minor_faults >= tree.minor_faults
        assert later.processes.read_bytes >= tree.read_bytes
        # ... and a child started late is counted at the next scrape
        int(_order(work, "spawn"))
        assert _scrape(url).processes.alive == 2
        assert _order(work, "end") == "ended"
        work.kill()
        work.wait()
        gone = _scrape(url).processes
        assert gone is not None and (gone.alive, gone.ended) == (0, 3)
        with pytest.raises(urllib.error.HTTPError) as not_found:
            urllib.request.urlopen(url.removesuffix("metrics") + "etc/passwd", timeout=10)
        assert not_found.value.code == 404


@pytest.mark.parametrize("method", residency.METHODS)
def test_residency_is_what_mincore_says_to_the_test(tmp_path, method):
    if method == residency.CACHESTAT and not residency.has_cachestat(sys.executable):
        pytest.skip("this kernel has no cachestat (Linux 6.5+)")
    table = _table(tmp_path, 256)
    with _workload(table) as work, start_agent("--pid", str(work.pid), "--table",
                                                str(tmp_path), "--residency", method) as (
            url, _, _):
        before = _resident_pages(table)
        sample = _scrape(url)
        after = _resident_pages(table)
    assert sample.residency == method
    (got,) = sample.tables
    assert got.path == str(table) and got.size_bytes == 256 * PAGE
    assert got.sampled_fraction == 1
    assert before * PAGE <= got.resident_bytes <= after * PAGE
    assert got.device == block_devices.disk_of(table.stat().st_dev)
    if got.device is not None:  # a real disk: its counters are served, and dropped pages read
        assert got.device in sample.disks and sample.disks[got.device].read_bytes > 0
        assert 128 <= before < 256


def test_a_file_no_block_device_holds_has_no_disk_series():
    shm = Path("/dev/shm")
    if not shm.is_dir() or block_devices.disk_of(shm.stat().st_dev) is not None:
        pytest.skip("no tmpfs at /dev/shm")
    folder = shm / f"engram-bench-test-{uuid.uuid4()}"
    folder.mkdir()
    try:
        (folder / "t.bin").write_bytes(b"\1" * PAGE)
        with start_agent("--pid", str(os.getpid()), "--table", str(folder)) as (url, agent, _):
            sample = _scrape(url)
            note = read_line(agent)
    finally:
        shutil.rmtree(folder)
    (got,) = sample.tables
    assert got.device is None and got.resident_bytes == PAGE
    assert sample.disks == {}
    assert note.startswith(f"note: no block device holds {folder}/t.bin")


def test_a_table_file_replaced_by_a_fifo_loses_its_series_and_the_agent_goes_on(tmp_path):
    table = _table(tmp_path, 4)
    with start_agent("--pid", str(os.getpid()), "--table", str(table)) as (url, _, _):
        assert len(_scrape(url).tables) == 1
        table.unlink()
        os.mkfifo(table)
        assert _scrape(url).tables == ()  # neither opened (it would block) nor invented
        table.unlink()
        assert _scrape(url).source == AGENT


def test_the_agent_leaves_itself_out_of_the_tree_it_watches():
    """Started here, the agent is this process's child: it counts this process and what else
    descends from it (a test runner may hold children, as multiprocessing's resource
    tracker), never itself."""
    with start_agent("--pid", str(os.getpid())) as (url, agent, _):
        alive = _scrape(url).processes.alive
        assert alive == len(_tree(os.getpid(), leaving_out=agent.pid))


def _tree(root: int, leaving_out: int) -> list[int]:
    """`root` and its descendants, the subtree of `leaving_out` aside: the test's own walk."""
    parents = {}
    for entry in Path("/proc").iterdir():
        stat = proc_tree.read_stat(int(entry.name)) if entry.name.isdigit() else None
        if stat is not None:
            parents[stat.pid] = stat.ppid
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(c for c, p in parents.items() if p == pid and c != leaving_out)
    return found


def test_stride_runs_cover_the_file_in_successive_samples():
    pages, window = 3 * residency.WINDOW_PAGES + 100, residency.WINDOW_PAGES
    whole = residency.stride_runs(pages, 1.0, 0)
    assert whole == [(0, window), (window, window), (2 * window, window), (3 * window, 100)]
    covered: set[int] = set()
    for phase in range(4):
        runs = residency.stride_runs(pages, 0.25, phase)
        assert [n for _, n in runs][:3] == [window // 4] * 3
        for first, count in runs:
            covered.update(range(first, first + count))
    assert covered == set(range(pages))


def test_mincore_in_strides_scales_the_sample_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(residency, "WINDOW_PAGES", 16)
    table = _table(tmp_path, 64)  # just written: every page cached
    got = residency.sample(str(table), 64 * PAGE, residency.MINCORE, 0.25, phase=1)
    assert got == residency.Residency(64 * PAGE, 0.25)
    sparse = tmp_path / "sparse.bin"
    with open(sparse, "wb") as f:
        f.truncate(64 * PAGE)
    assert residency.sample(str(sparse), 64 * PAGE, residency.MINCORE, 0.25, 0) == \
        residency.Residency(0, 0.25)


def test_a_sparse_200_gib_file_is_sampled_within_the_page_budget(tmp_path):
    sparse = tmp_path / "sparse.bin"
    size = 200 << 30
    with open(sparse, "wb") as f:
        f.truncate(size)
    got = residency.sample(str(sparse), size, residency.MINCORE,
                           residency.PAGE_BUDGET / (size // PAGE), 0)
    assert got is not None and got.resident_bytes == 0
    assert 0 < got.sampled_fraction * (size // PAGE) <= residency.PAGE_BUDGET + size // (1 << 30)


def test_parsers_read_the_kernels_lines():
    assert block_devices.parse_diskstats(
        " 259       0 nvme0n1 100 5 2048 30 7 0 56 4 2 40 70 0 0 0 0 0 0\n"
        " 259       1 nvme0n1p1 90 5 1024 20 7 0 56 4 0 30 50\n"
        "   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")["nvme0n1"] == \
        block_devices.DiskStats(read_bytes=2048 * 512, reads_completed=100, read_time_s=0.03,
                                io_now=2, io_time_s=0.04)
    assert system.parse_pressure("some avg10=0.00 avg60=0.18 avg300=0.23 total=1706814\n"
                                 "full avg10=0.00 avg60=0.15 avg300=0.20 total=1552344\n") == \
        {"some": 1.706814, "full": 1.552344}
    assert system.parse_meminfo("MemTotal: 100 kB\nCached:  2 kB\nAnonHugePages: 0 kB\n") == \
        {"MemTotal": 102400, "Cached": 2048, "AnonHugePages": 0}
    assert parse_status("Name:\tx\nVmLck:\t   4 kB\nRssFile:\t  8 kB\n")["rss_file"] == 8192
    stat = proc_tree.parse_stat(7, b"7 (a) b) c) S 1 7 7 0 -1 0 11 0 3 0 5 6 0 0 20 0 1 0 99 0")
    assert (stat.ppid, stat.minor_faults, stat.major_faults, stat.start_ticks) == (1, 11, 3, 99)


def test_the_agent_imports_neither_torch_nor_numpy():
    code = ("import sys, engram_bench.cli, runners.host_agent.agent; "
            "print(sorted({'numpy', 'torch'} & sys.modules.keys()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


def _gone_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    if Path(f"/proc/{proc.pid}").exists():
        pytest.skip("the PID was taken again at once")
    return proc.pid


def _fifo(tmp_path: Path) -> str:
    os.mkfifo(tmp_path / "fifo")
    return str(tmp_path / "fifo")


def _loop(tmp_path: Path) -> str:
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    return str(tmp_path / "loop")


def _empty(tmp_path: Path) -> str:
    (tmp_path / "empty").mkdir()
    return str(tmp_path / "empty")


@pytest.mark.parametrize(("args", "message"), [
    (lambda t: ["--pid", str(_gone_pid())], "no process with PID"),
    (lambda t: ["--match", f"no-such-server-{uuid.uuid4()}"], "no process's command line"),
    (lambda t: [], "--pid PID or --match TEXT"),
    (lambda t: ["--pid", str(os.getpid()), "--table", _fifo(t)], "is a FIFO, not a regular"),
    (lambda t: ["--pid", str(os.getpid()), "--table", "/dev/null"], "is a character device"),
    (lambda t: ["--pid", str(os.getpid()), "--table", _loop(t)], "is a symlink loop"),
    (lambda t: ["--pid", str(os.getpid()), "--table", str(t / "none")], "no such file"),
    (lambda t: ["--pid", str(os.getpid()), "--table", _empty(t)], "no regular file in it"),
])
def test_bad_input_is_one_sentence_and_exit_2(tmp_path, args, message):
    proc = run_cli("agent", "--port", "0", *args(tmp_path), timeout=60)
    assert proc.returncode == 2
    assert message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stdout == ""


def test_a_port_in_use_is_one_sentence_and_exit_2():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = run_cli("agent", "--pid", str(os.getpid()), "--port", str(port), timeout=60)
    assert proc.returncode == 2
    assert f"cannot serve on 127.0.0.1:{port}" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_the_full_clis_agent_command_refuses_alike(capsys):
    """engram_bench.cli, which `engram-bench agent` skips for its imports, runs it too."""
    assert main(["agent", "--match", f"no-such-server-{uuid.uuid4()}"]) == 2
    assert "no process's command line holds" in capsys.readouterr().err


def test_a_match_leaves_out_the_agent_and_finds_the_server(tmp_path):
    marker = f"server-{uuid.uuid4()}"
    server = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", marker],
                              stdin=subprocess.PIPE)
    try:  # a process just started shows its command line a moment after Popen returns
        deadline = time.monotonic() + 10
        while not (found := proc_tree.matching(marker)) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert found == [server.pid]
    finally:
        server.kill()
        server.wait()
