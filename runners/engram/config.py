"""Model presets: a small real decoder with the published Engram geometries (docs/design.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class ModelConfig:
    name: str
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    ffn: int
    max_seq: int
    engram_layers: tuple[int, ...]
    engram_orders: tuple[int, ...]
    engram_heads: int
    engram_row_values: int  # FP8 values per row, one byte each
    engram_scale_bytes: int = 0  # ue8m0 exponents per row, stored apart from the values
    seed: int = 0

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError("d_model must split into heads of even size (rotary)")
        if any(not 0 <= layer < self.n_layers for layer in self.engram_layers):
            raise ValueError("Engram layers must be layers of the model")
        if self.engram_scale_bytes and self.engram_row_values % self.engram_scale_bytes:
            raise ValueError("Engram scales must each cover an equal block of a row's values")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def engram_bytes_per_token(self) -> int:
        """Values and scales of every row a token reads."""
        return (len(self.engram_layers) * len(self.engram_orders) * self.engram_heads
                * (self.engram_row_values + self.engram_scale_bytes))


PRESETS: dict[str, ModelConfig] = {
    c.name: c
    for c in (
        # Qwen3.8-Flash-Next geometry: layer 2, orders 2-3, 8 heads, 160 B rows (2,560 B/token).
        ModelConfig("qwen-mini", 32_768, 640, 8, 10, 1792, 8192, (2,), (2, 3), 8, 160),
        # The same Engram geometry on a smaller decoder (a 4k-token prefill in ~1.7 s on a
        # 2-core CPU, qwen-mini ~8.5 s): for long-context studies.
        ModelConfig("qwen-small", 32_768, 256, 4, 4, 768, 8192, (2,), (2, 3), 8, 160),
        # DeepSeek-V4.1-Flash geometry: layers 1 and 14, orders 2-4, 8 heads, 256 FP8 values
        # per row plus 8 ue8m0 scale bytes (one per 32 values): 48 x 264 = 12,672 B/token.
        ModelConfig("deepseek-mini", 32_768, 512, 16, 8, 1536, 8192, (1, 14), (2, 3, 4), 8, 256,
                    engram_scale_bytes=8),
        # For tests: the Qwen geometry on a model small enough to run in milliseconds.
        ModelConfig("tiny", 32_768, 64, 4, 4, 128, 256, (1,), (2, 3), 8, 160),
        # For tests: the DeepSeek row format (scales, two Engram layers far apart), tiny model.
        ModelConfig("tiny-scaled", 32_768, 64, 4, 4, 128, 256, (0, 3), (2, 3), 8, 256,
                    engram_scale_bytes=8),
    )
}


def preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}") from None
