"""Builds the bundled tokenizer once: byte-level BPE, 32,768 tokens, trained deterministically.

No hub is reachable here, so the vocabulary is trained on text every Python install carries
(the standard library's sources and docstrings, files in sorted order). The result ships as
`data/tokenizer.json`; run `python -m runners.engram.build_tokenizer` only to rebuild it.
"""

from __future__ import annotations

import sysconfig
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB_SIZE = 32_768
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
OUT = Path(__file__).parent / "data" / "tokenizer.json"
CORPUS_LIMIT = 48 * 1024 * 1024


def corpus() -> Iterator[str]:
    """Standard-library sources in sorted order, up to CORPUS_LIMIT bytes."""
    root = Path(sysconfig.get_paths()["stdlib"])
    total = 0
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "test" in path.parts:
            continue
        try:
            text = path.read_text("utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        total += len(text)
        if total > CORPUS_LIMIT:
            return
        yield text


def build() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    return tok


if __name__ == "__main__":
    tokenizer = build()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(OUT))
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e6:.1f} MB, vocab {tokenizer.get_vocab_size()})")
