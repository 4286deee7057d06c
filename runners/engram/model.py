"""The bundled decoder: RMSNorm, rotary attention over a preallocated KV cache, MLP, and
Engram layers that add gated table rows to the residual stream.

As in DeepSeek's reference, an Engram layer's block starts with it: h = engram(h, rows), then
attention, then MLP. The forward pass takes a `rows_for(layer)` callback that blocks only
until that layer's own rows arrive, so each layer's gather overlaps every layer before it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from runners.engram.config import ModelConfig

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
    def forward(self, tokens: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor,
                cache: KVCache, rows_for: RowsFor, prefill: bool) -> torch.Tensor:
        """Decode: tokens/pos/slots are [B] (one new token per sequence). Prefill: one
        sequence, tokens/pos [T], slots [1]. Returns logits of each sequence's last token."""
        cfg = self.cfg
        h = self.embed(tokens)
        n_tok = tokens.shape[0]
        lengths = pos + 1 if not prefill else None
        for i, block in enumerate(self.blocks):
            if i in cfg.engram_layers:
                h = self.engrams[str(i)](h, rows_for(i))
            x = rms_norm(h, block.attn_norm)
            q, k, v = block.qkv(x).view(n_tok, 3, cfg.n_heads, cfg.head_dim).unbind(1)
            q, k = self._rope(q, pos), self._rope(k, pos)
            if prefill:
                cache.k[i, slots[0], pos] = k
                cache.v[i, slots[0], pos] = v
                keys = cache.k[i, slots[0], : int(pos[-1]) + 1].transpose(0, 1)
                vals = cache.v[i, slots[0], : int(pos[-1]) + 1].transpose(0, 1)
                att = F.scaled_dot_product_attention(
                    q.transpose(0, 1), keys, vals, is_causal=pos[0] == 0 and n_tok > 1,
                    attn_mask=None if pos[0] == 0 else _prefix_mask(pos, keys.shape[1]),
                )
                att = att.transpose(0, 1).reshape(n_tok, cfg.d_model)
            else:
                cache.k[i, slots, pos] = k
                cache.v[i, slots, pos] = v
                span = int(lengths.max())
                keys = cache.k[i, slots, :span].transpose(1, 2)  # [B, H, S, D]
                vals = cache.v[i, slots, :span].transpose(1, 2)
                mask = torch.arange(span, device=pos.device)[None, :] < lengths[:, None]
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


class KVCache:
    """Preallocated keys and values: [layers, slots, max_seq, heads, head_dim]."""

    def __init__(self, cfg: ModelConfig, slots: int, device: torch.device) -> None:
        shape = (cfg.n_layers, slots, cfg.max_seq, cfg.n_heads, cfg.head_dim)
        self.k = torch.zeros(shape, device=device)
        self.v = torch.zeros(shape, device=device)


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
