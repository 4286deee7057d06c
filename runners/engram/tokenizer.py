"""The bundled tokenizer (byte-level BPE, 32,768 tokens, shipped in data/tokenizer.json)."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

TOKENIZER_PATH = Path(__file__).parent / "data" / "tokenizer.json"


LONG_TEXT_CHARS = 64 * 1024  # ~a few ms to tokenize here; a 1 MB text takes ~0.5 s


class EngramTokenizer:
    """Exact prompt token counts for the bundled server, and a ChatML-style chat template."""

    def __init__(self, path: Path = TOKENIZER_PATH) -> None:
        self._tok = Tokenizer.from_file(str(path))
        self.vocab_size = self._tok.get_vocab_size()
        self.eos_id = self._special("<|endoftext|>")
        self.im_start_id = self._special("<|im_start|>")
        self.im_end_id = self._special("<|im_end|>")

    def _special(self, token: str) -> int:
        token_id = self._tok.token_to_id(token)
        if token_id is None:
            raise ValueError(f"tokenizer lacks the special token {token}")
        return token_id

    def encode(self, text: str) -> list[int]:
        """A long text goes through the batch call, which lets go of the GIL (and skips the
        offsets): tokenized in a thread, it then leaves the event loop free."""
        if len(text) < LONG_TEXT_CHARS:
            return self._tok.encode(text, add_special_tokens=False).ids
        return self._tok.encode_batch_fast([text], add_special_tokens=False)[0].ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=True)

    def token_texts(self) -> list[str]:
        """Each id's own text, special tokens included; incomplete UTF-8 shows as U+FFFD."""
        return self._tok.decode_batch([[i] for i in range(self.vocab_size)],
                                      skip_special_tokens=False)

    def chat_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        """<|im_start|>role\\ncontent<|im_end|>\\n per message, then the assistant's turn."""
        ids: list[int] = []
        newline = self.encode("\n")
        for message in messages:
            ids += [self.im_start_id, *self.encode(f"{message['role']}\n{message['content']}"),
                    self.im_end_id, *newline]
        return [*ids, self.im_start_id, *self.encode("assistant\n")]


class StreamDecoder:
    """Turns generated ids into text deltas; holds back an incomplete UTF-8 sequence."""

    def __init__(self, tokenizer: EngramTokenizer) -> None:
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._emitted = 0  # characters of the decoded text already sent

    def push(self, token_id: int) -> str:
        self._ids.append(token_id)
        text = self._tokenizer.decode(self._ids)
        if text.endswith("\ufffd"):  # a multi-byte character still incomplete
            return ""
        delta = text[self._emitted :]
        self._emitted = len(text)
        if len(self._ids) > 64:  # keep decoding cost flat: restart from a clean boundary
            self._ids.clear()
            self._emitted = 0
        return delta
