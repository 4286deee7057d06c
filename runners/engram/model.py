"""The bundled decoder: RMSNorm, rotary attention over a paged KV pool, MLP, and
Engram layers that add gated table rows to the residual stream.

As in DeepSeek's reference, an Engram layer's block starts with it: h = engram(h, rows), then
attention, then MLP. The forward pass takes a `rows_for(layer)` callback that blocks only
until that layer's own rows arrive, so each layer's gather overlaps every layer before it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from runners.engram.config import ModelConfig
from runners.engram.kv_blocks import BLOCK_SIZE

# layer index -> uint8 [tokens, rows, row_values + scale_bytes]: FP8 values, then exponents
RowsFor = Callable[[int], torch.Tensor]
UE8M0_BIAS = 127  # a ue8m0 scale byte e stands for 2 ** (e - 127)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    return x * weight if weight is not None else x


class Engram(nn.Module):
    """Rows (FP8, dequantised here) -> value and key projections; sigmoid gate on the
    normalised dot product of hidden state and key; the gated value joins the residual."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.values = cfg.engram_row_values
        self.scales = cfg.engram_scale_bytes
        width = len(cfg.engram_orders) * cfg.engram_heads * cfg.engram_row_values
        self.value = nn.Linear(width, cfg.d_model, bias=False)
        self.key = nn.Linear(width, cfg.d_model, bias=False)
        self.scale = 1.0 / math.sqrt(cfg.d_model)

    def dequantise(self, rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """uint8 [tokens, rows, values + scales] -> [tokens, rows * values]: each scale
        multiplies its block of values // scales consecutive values."""
        x = rows[..., : self.values].view(torch.float8_e4m3fn).to(dtype)
        if self.scales:
            exponents = rows[..., self.values :].to(torch.float32) - UE8M0_BIAS
            blocks = x.unflatten(-1, (self.scales, -1))
            x = (blocks * torch.exp2(exponents).to(dtype).unsqueeze(-1)).flatten(-2)
        return x.flatten(1)  # order-major concat

    def forward(self, h: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        x = self.dequantise(rows, h.dtype)
        gate = torch.sigmoid((rms_norm(h) * rms_norm(self.key(x))).sum(-1, keepdim=True)
                             * self.scale)
        return h + gate * self.value(x)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.attn_norm = nn.Parameter(torch.ones(cfg.d_model))
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.out = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.mlp_norm = nn.Parameter(torch.ones(cfg.d_model))
        self.up = nn.Linear(cfg.d_model, 2 * cfg.ffn, bias=False)
        self.down = nn.Linear(cfg.ffn, cfg.d_model, bias=False)


class EngramLM(nn.Module):
    cos: torch.Tensor  # rotary tables, registered as buffers in __init__
    sin: torch.Tensor

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.engrams = nn.ModuleDict({str(i): Engram(cfg) for i in cfg.engram_layers})
        self.final_norm = nn.Parameter(torch.ones(cfg.d_model))
        inv = 1.0 / (10000 ** (torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim))
        angles = torch.outer(torch.arange(cfg.max_seq).float(), inv)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def init_weights(self) -> None:
        """Seeded dummy weights (like a dummy load format): N(0, 0.02), norms at 1."""
        gen = torch.Generator().manual_seed(self.cfg.seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "norm" in name:
                    p.fill_(1.0)
                else:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.02)

    def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos[pos].unsqueeze(-2), self.sin[pos].unsqueeze(-2)
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, pos: torch.Tensor, tables: torch.Tensor,
                kv: PagedKV, rows_for: RowsFor, prefill: bool) -> torch.Tensor:
        """Decode: tokens/pos are [B] (one new token per sequence), tables [B, blocks].
        Prefill: one sequence, tokens/pos [T] (positions continuing any cached prefix: the
        prefix's KV is read from its blocks, not computed), tables [1, blocks]. Returns the
        logits of each sequence's last token."""
        cfg = self.cfg
        h = self.embed(tokens)
        n_tok = tokens.shape[0]
        bs = kv.block_size
        # where each new token's K/V goes, and where each sequence's context is read from
        write = tables[0, pos // bs] * bs + pos % bs if prefill else (
            tables[torch.arange(n_tok, device=pos.device), pos // bs] * bs + pos % bs)
        span = int(pos[-1]) + 1 if prefill else int(pos.max()) + 1
        ctx = torch.arange(span, device=pos.device)
        read = tables[:, ctx // bs] * bs + ctx % bs  # [B, span] (B = 1 for a prefill)
        first = int(pos[0])  # a prefill after a cached prefix starts past 0
        for i, block in enumerate(cast("Iterable[Block]", self.blocks)):
            if i in cfg.engram_layers:
                h = self.engrams[str(i)](h, rows_for(i))
            x = rms_norm(h, block.attn_norm)
            q, k, v = block.qkv(x).view(n_tok, 3, cfg.n_heads, cfg.head_dim).unbind(1)
            q, k = self._rope(q, pos), self._rope(k, pos)
            k_flat, v_flat = kv.layer(i)
            k_flat[write] = k
            v_flat[write] = v
            keys = k_flat[read].transpose(1, 2)  # [B, H, S, D]
            vals = v_flat[read].transpose(1, 2)
            if prefill:
                att = F.scaled_dot_product_attention(
                    q.transpose(0, 1), keys[0], vals[0], is_causal=first == 0 and n_tok > 1,
                    attn_mask=None if first == 0 else _prefix_mask(pos, span),
                )
                att = att.transpose(0, 1).reshape(n_tok, cfg.d_model)
            else:
                mask = ctx[None, :] <= pos[:, None]
                att = F.scaled_dot_product_attention(q.unsqueeze(2), keys, vals,
                                                     attn_mask=mask[:, None, None, :])
                att = att.reshape(n_tok, cfg.d_model)
            h = h + block.out(att)
            gate, up = block.up(rms_norm(h, block.mlp_norm)).chunk(2, -1)
            h = h + block.down(F.silu(gate) * up)
        last = h[-1:] if prefill else h
        return rms_norm(last, self.final_norm) @ self.embed.weight.T


def _prefix_mask(pos: torch.Tensor, span: int) -> torch.Tensor:
    """Causal mask for a prefill that continues an existing prefix (positions pos)."""
    return torch.arange(span, device=pos.device)[None, :] <= pos[:, None]


def kv_bytes_per_token(cfg: ModelConfig) -> int:
    """Keys and values of one token, every layer, fp32."""
    return 2 * cfg.n_layers * cfg.d_model * 4


class PagedKV:
    """The KV pool: keys and values [layers, num_blocks, block_size, heads, head_dim], fp32,
    allocated (and zeroed, so the memory is really taken) at start. Sequences address it
    through block tables (kv_blocks.py)."""

    def __init__(self, cfg: ModelConfig, num_blocks: int, device: torch.device,
                 block_size: int = BLOCK_SIZE) -> None:
        shape = (cfg.n_layers, num_blocks, block_size, cfg.n_heads, cfg.head_dim)
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.k = torch.zeros(shape, device=device)
        self.v = torch.zeros(shape, device=device)

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer i's keys and values as [num_blocks * block_size, heads, head_dim] views."""
        return self.k[i].flatten(0, 1), self.v[i].flatten(0, 1)

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes


def block_tables(tables: list[list[int]], device: torch.device) -> torch.Tensor:
    """Per-sequence block ids, padded with block 0 (masked out) to one width."""
    width = max(len(t) for t in tables)
    return torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.long,
                        device=device)


def load_model(cfg: ModelConfig, weights_dir: Path, device: torch.device) -> EngramLM:
    """Seeded weights, saved once as safetensors and loaded from there afterwards."""
    model = EngramLM(cfg)
    fingerprint = hashlib.sha1(repr(cfg).encode()).hexdigest()[:10]  # shape and seed
    path = weights_dir / f"{cfg.name}-{fingerprint}.safetensors"
    if path.exists():
        model.load_state_dict(load_file(str(path)), strict=True)
    else:
        model.init_weights()
        weights_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".partial")
        save_file(model.state_dict(), str(tmp))
        tmp.replace(path)
    return model.to(device).eval()
