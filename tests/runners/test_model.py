"""The decoder's Engram layer: where it sits in its block, and the FP8 + ue8m0 row format."""

import pytest
import torch

from runners.engram.config import preset
from runners.engram.geometry import EngramGeometry
from runners.engram.model import EngramLM, PagedKV

DEEPSEEK = dict(layers=(1, 14), orders=(2, 3, 4), heads=8, row_bytes=256)


@pytest.fixture(scope="module")
def model():
    lm = EngramLM(preset("tiny-scaled"))
    lm.init_weights()
    return lm.eval()


def random_rows(tokens: int, cfg, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    width = cfg.engram_row_values + cfg.engram_scale_bytes
    rows = torch.randint(0, 256, (tokens, len(cfg.engram_orders) * cfg.engram_heads, width),
                         generator=gen, dtype=torch.uint8)
    rows[..., : cfg.engram_row_values] &= 0xBF
    rows[..., cfg.engram_row_values :] = 124 + rows[..., cfg.engram_row_values :] % 7
    return rows


def test_the_engram_layer_comes_before_the_attention_of_its_block(model):
    """The last block's Engram rows of an earlier token reach the last token's logits: only
    through that block's attention, so the Engram layer must run before it."""
    cfg = model.cfg
    last = cfg.n_layers - 1
    assert last in cfg.engram_layers
    tokens = torch.tensor([5, 900, 31, 4000, 77])
    rows = {layer: random_rows(len(tokens), cfg, layer) for layer in cfg.engram_layers}

    def logits(rows_by_layer):
        kv = PagedKV(cfg, 1, torch.device("cpu"))
        return model(tokens, torch.arange(len(tokens)), torch.tensor([[0]]), kv,
                     rows_by_layer.__getitem__, True)

    changed = dict(rows)
    changed[last] = rows[last].clone()
    changed[last][0] = random_rows(1, cfg, 99)[0]  # only the first token's rows
    assert not torch.equal(logits(rows), logits(changed))


def test_each_scale_multiplies_its_own_block_of_values(model):
    engram = model.engrams[str(model.cfg.engram_layers[0])]
    cfg = model.cfg
    rows = random_rows(2, cfg, 0)
    rows[..., cfg.engram_row_values :] = 127  # 2**0: the plain e4m3 values
    plain = engram.dequantise(rows, torch.float32)
    values = rows[..., : cfg.engram_row_values].view(torch.float8_e4m3fn).float().flatten(1)
    assert torch.equal(plain, values)
    rows[0, 3, cfg.engram_row_values + 1] = 128  # row 3's second block of token 0, doubled
    scaled = engram.dequantise(rows, torch.float32)
    block = cfg.engram_row_values // cfg.engram_scale_bytes
    start = 3 * cfg.engram_row_values + block
    doubled = torch.zeros_like(plain, dtype=torch.bool)
    doubled[0, start : start + block] = True
    assert torch.equal(scaled[doubled], 2 * plain[doubled])
    assert torch.equal(scaled[~doubled], plain[~doubled])


def test_scales_count_in_bytes_per_token_table_size_and_header():
    plain = EngramGeometry(**DEEPSEEK, table_bytes=8 * 2**20)
    scaled = EngramGeometry(**DEEPSEEK, table_bytes=8 * 2**20, scale_bytes=8)
    assert scaled.bytes_per_token == 48 * 264 == preset("deepseek-mini").engram_bytes_per_token
    assert (plain.accesses_per_row, scaled.accesses_per_row) == (1, 2)
    assert scaled.total_rows * scaled.row_width <= 8 * 2**20
    assert scaled.total_rows < plain.total_rows  # the scales take their share of the bytes
    assert scaled.params() != plain.params()  # a table built without scales is refused
    with pytest.raises(ValueError, match="equal block"):
        EngramGeometry(**DEEPSEEK, table_bytes=8 * 2**20, scale_bytes=7)

