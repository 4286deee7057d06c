"""Geometry, tokenizer, table file and every table placement (small tables, CPU)."""

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout

import numpy as np
import pytest
import torch

from runners.engram import table_file
from runners.engram.geometry import EngramGeometry, is_prime
from runners.engram.table_store import open_store
from runners.engram.tokenizer import LONG_TEXT_CHARS, EngramTokenizer, StreamDecoder

QWEN = dict(layers=(2,), orders=(2, 3), heads=8, row_bytes=160)
DEEPSEEK = dict(layers=(1, 14), orders=(2, 3, 4), heads=8, row_bytes=256)


def test_geometry_bytes_per_token_and_distinct_primes():
    q = EngramGeometry(**QWEN, table_bytes=8 * 2**20)
    d = EngramGeometry(**DEEPSEEK, table_bytes=8 * 2**20)
    assert (q.rows_per_token, q.bytes_per_token) == (16, 2560)
    assert (d.rows_per_token, d.bytes_per_token) == (48, 12288)
    primes = d.primes.ravel().tolist()
    assert len(set(primes)) == len(primes) and all(is_prime(p) for p in primes)
    assert (d.multipliers % 2 == 1).all()
    assert d.total_rows * d.row_bytes <= 8 * 2**20


def test_rows_depend_only_on_the_suffix_ngram():
    g = EngramGeometry(**QWEN, table_bytes=8 * 2**20)
    context = np.array([5, 9, 7, 7, 1, 300], dtype=np.int64)
    full = g.row_ids(context, len(context))
    assert full.shape == (6, 1, 16)
    last = g.row_ids(context[-3:], 1)  # the last max_order-1 ids suffice
    assert np.array_equal(last[0], full[-1])
    assert full.min() >= 0 and full.max() < g.total_rows
    # each (order, head) block stays inside its own range of rows
    for oi in range(2):
        for h in range(8):
            col = full[:, 0, oi * 8 + h]
            lo = g.offsets[0, oi, h]
            assert ((col >= lo) & (col < lo + g.primes[0, oi, h])).all()


def test_tokenizer_is_a_real_32k_subword_vocabulary():
    tok = EngramTokenizer()
    assert tok.vocab_size >= 32_000
    ids = tok.encode("Hello, world! Engram tables live on NVMe.")
    assert tok.decode(ids) == "Hello, world! Engram tables live on NVMe."
    assert len(ids) < len("Hello, world! Engram tables live on NVMe.")  # subwords, not bytes
    prompt = tok.chat_prompt([{"role": "user", "content": "hi"}])
    assert prompt[0] == tok.im_start_id and prompt[-1] != tok.im_end_id


def test_a_long_text_tokenizes_as_its_pieces_do():
    """A text past LONG_TEXT_CHARS takes the batch path (GIL released): same ids as the
    plain path gives the same words, sentence by sentence."""
    tok = EngramTokenizer()
    sentence = "Une phrase où l'Engram lit 12 KB par jeton. "
    assert len(sentence * 2000) >= LONG_TEXT_CHARS
    one = tok.encode(sentence.rstrip())
    ids = tok.encode((sentence * 2000).rstrip())
    assert ids[: len(one)] == one and len(ids) > 1000 * len(one)


def test_stream_decoder_holds_back_partial_characters():
    tok = EngramTokenizer()
    text = "naïve café ☕ done"
    dec = StreamDecoder(tok)
    assert "".join(dec.push(i) for i in tok.encode(text)) == text


@pytest.fixture(scope="module")
def small_table(tmp_path_factory):
    geometry = EngramGeometry(**QWEN, table_bytes=4 * 2**20)
    path = tmp_path_factory.mktemp("table") / "table.bin"
    return geometry, table_file.create(path, geometry)


def test_table_file_is_reused_and_foreign_files_refused(small_table, tmp_path):
    geometry, table = small_table
    assert table_file.open_or_create(table.path, geometry).rows == geometry.total_rows
    other = EngramGeometry(**QWEN, table_bytes=4 * 2**20, seed=1)
    with pytest.raises(table_file.TableFileError, match="built for another table"):
        table_file.open_verified(table.path, other)
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not a table" * 100)
    with pytest.raises(table_file.TableFileError, match="bad magic"):
        table_file.open_or_create(junk, geometry)
    assert junk.read_bytes() == b"not a table" * 100  # refused, never rebuilt over


def test_servers_that_start_at_once_write_one_table(monkeypatch, tmp_path):
    """The second waits for the first, held as it begins to write, then reads its file: it
    neither writes the same temporary file nor leaves the first none to rename."""
    geometry = EngramGeometry(**QWEN, table_bytes=4 * 2**20)
    path = tmp_path / "tables" / "t.bin"
    chunks, held, release = table_file._fp8_chunks, threading.Event(), threading.Event()

    def first_held(*args):
        if not held.is_set():  # the first writer, its file opened
            held.set()
            release.wait(30)
        yield from chunks(*args)

    monkeypatch.setattr(table_file, "_fp8_chunks", first_held)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(table_file.open_or_create, path, geometry)
        assert held.wait(30)
        second = pool.submit(table_file.open_or_create, path, geometry)
        with contextlib.suppress(FuturesTimeout):
            second.result(timeout=1)  # unlocked, it would write its own meanwhile
        release.set()
        tables = [first.result(timeout=60), second.result(timeout=60)]
    assert [t.rows for t in tables] == [geometry.total_rows] * 2
    assert table_file.open_verified(path, geometry).rows == geometry.total_rows


def test_truncated_and_changed_files_are_refused(small_table, tmp_path):
    geometry, table = small_table
    copy = tmp_path / "t.bin"
    data = table.path.read_bytes()
    copy.write_bytes(data[:-4096])
    with pytest.raises(table_file.TableFileError, match="truncated"):
        table_file.open_verified(copy, geometry)
    changed = bytearray(data)
    changed[table_file.HEADER_BYTES : table_file.HEADER_BYTES + 8] = b"\x01" * 8
    copy.write_bytes(bytes(changed))
    with pytest.raises(table_file.TableFileError, match="checksum"):
        table_file.open_verified(copy, geometry)


@pytest.mark.parametrize(("placement", "io"), [("host", "mmap"), ("nvme", "mmap"),
                                               ("nvme", "direct")])
def test_every_placement_gathers_the_same_bytes(small_table, placement, io):
    geometry, table = small_table
    rows = geometry.row_ids(np.arange(40) % 7, 40)  # repeats: duplicates fetched once
    reference = open_store(table, "device", "mmap", torch.device("cpu"), 2**20)
    store = open_store(table, placement, io, torch.device("cpu"), budget_bytes=2**20)
    try:
        for _ in range(3):  # the later passes exercise the row cache / page cache
            got = store.submit(rows).wait()
            assert torch.equal(got, reference.submit(rows).wait())
        counters = store.counters.snapshot()
        assert counters["rows_requested"] == 3 * rows.size
        assert counters["unique_rows_requested"] == 3 * np.unique(rows).size < rows.size * 3
        residency = store.residency()
        if (placement, io) == ("nvme", "mmap"):  # measured by mincore, within the budget
            assert 0 < residency["table_resident_bytes"] <= 2**20
            assert counters["pages_evicted"] == 0
        else:  # in memory or behind O_DIRECT: no page-cache residency to measure
            assert residency["table_resident_bytes"] is None
        if io == "direct" and placement == "nvme":
            assert counters["row_cache_hits"] > 0
    finally:
        store.close()
        reference.close()


@pytest.mark.parametrize("io", ["mmap", "direct"])
def test_a_budget_smaller_than_the_working_set_evicts(small_table, io):
    geometry, table = small_table
    rows = geometry.row_ids(np.arange(200), 200)
    reference = open_store(table, "device", "mmap", torch.device("cpu"), 2**20)
    store = open_store(table, "nvme", io, torch.device("cpu"), budget_bytes=64 * 1024)
    try:
        for chunk in np.array_split(rows, 50):
            assert torch.equal(store.submit(chunk).wait(), reference.submit(chunk).wait())
        if io == "mmap":
            store.residency()  # waits for nothing: mincore now
            assert store.counters.snapshot()["pages_evicted"] > 0
        else:
            assert store.counters.snapshot()["row_cache_misses"] > 64 * 1024 // 160
    finally:
        store.close()
        reference.close()
