"""The Engram compression map: vocabulary ids that normalise alike share one id before hashing.

As in the Engram paper, each token's text is normalised (NFKC, lowercase, every run of
whitespace merged into one space) so that "The"/"the" or " Hello"/" hello" address the same
table rows. Unlike DeepSeek's demo, accents are kept and surrounding whitespace is not
stripped: a leading space marks a word start, and stays as one space. A byte-level token whose
bytes are not complete UTF-8 (its text shows U+FFFD) maps to itself. Each group maps to its
smallest id, so the map is idempotent and needs no new id space.
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np

from runners.engram.tokenizer import EngramTokenizer

_WHITESPACE = re.compile(r"\s+")
_INCOMPLETE = "\ufffd"


def normalise(text: str) -> str:
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", text).lower())


def compression_map(tokenizer: EngramTokenizer) -> np.ndarray:
    """int64 [vocab]: each id's representative (the smallest id of its normalised text)."""
    out = np.arange(tokenizer.vocab_size, dtype=np.int64)
    first: dict[str, int] = {}
    for token_id, text in enumerate(tokenizer.token_texts()):
        if _INCOMPLETE in text:
            continue
        out[token_id] = first.setdefault(normalise(text), token_id)
    return out
