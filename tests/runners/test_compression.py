"""The compression map: tokens that normalise alike read the same Engram rows."""

import dataclasses

import numpy as np
import pytest

from runners.engram.compression import compression_map
from runners.engram.geometry import EngramGeometry
from runners.engram.tokenizer import EngramTokenizer

QWEN = dict(layers=(2,), orders=(2, 3), heads=8, row_bytes=160, table_bytes=8 * 2**20)


@pytest.fixture(scope="module")
def tok():
    return EngramTokenizer()


@pytest.fixture(scope="module")
def cmap(tok):
    return compression_map(tok)


def one_id(tok, text):
    (token_id,) = tok.encode(text)
    return token_id


def test_case_variants_share_an_id_and_word_starts_stay_apart(tok, cmap):
    def same(a, b):
        return cmap[one_id(tok, a)] == cmap[one_id(tok, b)]

    assert same(" the", " The") and same("Hello", "hello") and same("the", "The")
    assert not same(" the", "the")  # the leading space marks a word start
    assert not same(" the", " he") and not same("hello", " hello")


def test_whitespace_runs_merge_and_every_group_maps_to_its_smallest_id(tok, cmap):
    texts = tok.token_texts()
    newline_runs = [i for i, t in enumerate(texts) if t and set(t) == {"\n"}]
    assert len(newline_runs) > 1 and len({int(cmap[i]) for i in newline_runs}) == 1
    assert cmap.shape == (tok.vocab_size,) and (cmap <= np.arange(tok.vocab_size)).all()
    assert np.array_equal(cmap[cmap], cmap)  # representatives map to themselves
    assert len(np.unique(cmap)) < tok.vocab_size


def test_partial_utf8_tokens_and_special_tokens_map_to_themselves(tok, cmap):
    partial = [i for i, t in enumerate(tok.token_texts()) if "\ufffd" in t]
    assert partial and all(cmap[i] == i for i in partial)
    assert all(cmap[i] == i for i in (tok.eos_id, tok.im_start_id, tok.im_end_id))


def test_rows_follow_the_compressed_ids(tok, cmap):
    plain = EngramGeometry(**QWEN)
    merged = EngramGeometry(**QWEN, compression=cmap)
    upper, lower = tok.encode("The cat sat on the mat"), tok.encode("the cat sat on the mat")
    other = tok.encode("A cat sat on the mat")
    assert len(upper) == len(lower) == len(other)

    def rows(geometry, ids):
        return geometry.row_ids(np.array(ids), len(ids))

    assert np.array_equal(rows(merged, upper), rows(merged, lower))
    assert not np.array_equal(rows(plain, upper), rows(plain, lower))
    assert not np.array_equal(rows(merged, upper)[:2], rows(merged, other)[:2])
    assert merged.params() == plain.params()  # the table's content does not depend on it
    assert merged.params() == dataclasses.replace(merged, compression=None).params()
