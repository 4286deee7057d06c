"""Prompt sources (`run --prompts`): what each request asks, unique and rebuilt alike on resume.

- `words`: the request key, then one seeded bag of common words in an order of its own per
  request (any server; the historical default). Every prompt holds the same words, so the server
  counts the same tokens for each, give or take the key's digits (~0.3 %, where drawing the
  words anew per request spread them ~4 %); the orders differ from the first word on.
- `text`: a window of natural prose (common.corpus, or the user's own text file) cut at a
  per-request offset, so the n-grams a request sends, and the Engram rows they address, follow
  real text; no key is added, whose digits would be n-grams no other request shares. Windows
  are cut at a count of pieces (words and punctuation marks), not of words: their token counts
  then vary about half as much, so even a level of two requests sends the calibrated length.
- a `.jsonl` file: the user's own prompts at their own lengths, in a seeded order.

Each request of a run has a distinct ordinal (harness.run.sweep); a source turns it into a prompt.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import random
import re
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar, Protocol

from common import corpus
from harness.config import MAX_REQUEST_TOKENS

BUILTIN = ("words", "text")
_PIECE = re.compile(r"\w+|[^\w\s]")
_WORD = re.compile(r"\w+")

# Common English words: one token each in most subword vocabularies, so counts stay stable.
_WORDS = """
time year people way day man thing woman life child world school state family student group
country problem hand part place case week company system program question work government
number night point home water room mother area money story fact month lot right study book
eye job word business issue side kind head house service friend father power hour game line
end member law car city community name president team minute idea kid body information back
parent face others level office door health person art war history party result change
morning reason research girl guy moment air teacher force education foot boy age policy
process music market sense nation plan college interest death experience effect use class
control care field development role effort rate heart drug show leader light voice wife
police mind price report decision son view relationship town road arm difference value
building action model season society tax director position player record paper space ground
form event official matter center couple site project activity star table need court oil
situation cost industry figure street image phone data picture practice piece land product
doctor wall patient worker news test movie north love support technology step baby computer
type attention film tree source organization hair window evidence population truth song
river garden summer winter spring autumn bridge mountain ocean island forest valley desert
""".split()  # noqa: SIM905 (a word list reads better as text)

_NO_PROMPT = ('has no prompt: expected {"prompt": ...}, "messages" with a user message, or '
              '"conversations" with a human turn')


class PromptFileError(ValueError):
    """A --prompts file that cannot be used; one sentence naming the file (and line)."""


class Prompts(Protocol):
    calibrated: ClassVar[bool]  # False: prompts keep their own lengths (no calibration)

    def sized(self, words: int) -> Prompts: ...

    def text(self, key: str, ordinal: int) -> str: ...

    def digest(self) -> str: ...

    def changed(self, digest: str) -> str | None:
        """None when `digest`, stored as a run began, is this source's; else what changed, a
        clause naming it ("prompts file p.jsonl has changed")."""

    def describe(self) -> str: ...


def _digest(items: tuple[str, ...]) -> str:
    return hashlib.sha256("\n".join(items).encode()).hexdigest()[:16]


def _changed(source: Prompts, digest: str, what: str) -> str | None:
    return None if digest == source.digest() else f"{what} has changed"


def pieces(text: str) -> int:
    """Words and punctuation marks: how tokenizers split text before subwords."""
    return len(_PIECE.findall(text))


def spread(seed: int, ordinal: int, n: int) -> int:
    """Position of `ordinal` in a seeded walk over n slots: n consecutive ordinals hit n
    distinct slots (a stride coprime with n), and neighbouring ordinals land far apart."""
    rng = random.Random(f"{seed}:{n}")
    stride = max(round(n * 0.618), 1) + rng.randrange(max(n // 16, 1))
    while math.gcd(stride, n) != 1:
        stride += 1
    return (rng.randrange(n) + ordinal * stride) % n


@functools.lru_cache(maxsize=16)
def _bag(seed: int, words: int) -> tuple[str, ...]:
    """The run's common words: drawn once per size, not per request."""
    draw = random.Random(f"{seed}:bag")
    return tuple(draw.choice(_WORDS) for _ in range(words))


@dataclass(slots=True, frozen=True)
class RandomWords:
    """`words`: the request key, then the run's bag of common words shuffled by the key;
    `words` is set by calibration. The bag is drawn from the seed alone, so calibration fits
    the very words every request sends."""

    seed: int = 0
    words: int = 96
    calibrated: ClassVar[bool] = True

    def sized(self, words: int) -> RandomWords:
        return replace(self, words=words)

    def text(self, key: str, ordinal: int) -> str:
        bag = list(_bag(self.seed, max(self.words - 5, 1)))
        random.Random(f"{self.seed}:{key}").shuffle(bag)
        return f"Request {key}. Continue this story: {' '.join(bag)}"

    def digest(self) -> str:
        return _digest(("bag", *_WORDS))  # "bag": runs begun with words drawn per request differ

    def changed(self, digest: str) -> str | None:
        return _changed(self, digest, "the prompts' word list (--prompts words)")

    def describe(self) -> str:
        return "random common words"


@dataclass(slots=True, frozen=True)
class RunningText:
    """`text` or a text file: consecutive words of a circular text from a per-request offset,
    distinct for up to len(corpus) requests, so no two prompts start alike. A window holds as
    many pieces as `words` words of this text hold on average (`pieces_per_word`)."""

    corpus: tuple[str, ...]
    source: str
    pieces_per_word: float
    seed: int = 0
    words: int = 96
    calibrated: ClassVar[bool] = True

    def sized(self, words: int) -> RunningText:
        return replace(self, words=words)

    def text(self, key: str, ordinal: int) -> str:
        n = len(self.corpus)
        start = spread(self.seed, ordinal, n)
        budget = round(self.words * self.pieces_per_word)
        window: list[str] = []
        count = 0
        while count < budget and len(window) < n:
            word = self.corpus[(start + len(window)) % n]
            window.append(word)
            count += pieces(word)
        return " ".join(window)

    def digest(self) -> str:
        return _digest(("cut by pieces", *self.corpus))

    def changed(self, digest: str) -> str | None:
        return _changed(self, digest, f"the prompts' text ({self.source})")

    def describe(self) -> str:
        return f"natural text ({self.source}, {len(self.corpus):,} words)"


@dataclass(slots=True, frozen=True)
class FixedPrompts:
    """A `.jsonl` file: its prompts as written, cycled in a seeded order."""

    prompts: tuple[str, ...]
    source: str
    seed: int = 0
    calibrated: ClassVar[bool] = False

    def sized(self, words: int) -> FixedPrompts:
        return self

    def text(self, key: str, ordinal: int) -> str:
        return self.prompts[spread(self.seed, ordinal, len(self.prompts))]

    def digest(self) -> str:
        return _digest(self.prompts)

    def changed(self, digest: str) -> str | None:
        return _changed(self, digest, f"prompts file {self.source}")

    def describe(self) -> str:
        return f"{len(self.prompts)} prompt(s) from {self.source} at their own lengths"


def load(spec: str, seed: int = 0) -> Prompts:
    """The source named by `--prompts`: words, text, or a file (PromptFileError if unusable)."""
    if spec == "words":
        return RandomWords(seed)
    if spec == "text":
        return _running_text(corpus.text(), "Python documentation", seed)
    content = _read(Path(spec))
    if spec.endswith(".jsonl"):
        return FixedPrompts(_jsonl_prompts(spec, content), spec, seed)
    if not content.split():
        raise PromptFileError(f"prompts file {spec} has no text")
    return _running_text(content, spec, seed)


def _running_text(content: str, source: str, seed: int) -> RunningText:
    words = tuple(content.split())
    return RunningText(words, source, pieces(content) / len(words), seed)


MAX_FILE_BYTES = 256 * 2**20  # a prompt source past this is refused, not read into memory


def _read(path: Path) -> str:
    """The file's text, read no further than MAX_FILE_BYTES. A pipe or a device is refused
    unopened: opening a pipe waits for a writer, a device may never end, and neither reads
    the same again when `--resume` rebuilds the run's prompts."""
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise PromptFileError(f"prompts file {path} is not a regular file (a pipe or a "
                                  "device cannot be read alike again by --resume): save its "
                                  "prompts to a file and give that")
        size = st.st_size
        if size <= MAX_FILE_BYTES:
            with path.open("rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)  # a file growing meanwhile is cut off here
            size = len(data)
        if size > MAX_FILE_BYTES:
            raise PromptFileError(f"prompts file {path} holds {size / 2**20:.0f} MiB, above the "
                                  f"{MAX_FILE_BYTES // 2**20} MiB a prompt source may have")
    except FileNotFoundError:
        raise PromptFileError(f"prompts file {path} does not exist") from None
    except OSError as exc:
        raise PromptFileError(f"cannot read prompts file {path}: {exc.strerror}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise PromptFileError(f"{path} line {line} is not UTF-8 text") from None


def _jsonl_prompts(name: str, content: str) -> tuple[str, ...]:
    prompts = []
    for number, line in enumerate(content.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except RecursionError:
            raise PromptFileError(f"{name} line {number} is JSON nested too deeply to "
                                  "read") from None
        except ValueError:
            raise PromptFileError(f"{name} line {number} is not JSON") from None
        prompt = first_user_prompt(obj)
        if not prompt:
            raise PromptFileError(f"{name} line {number} {_NO_PROMPT}")
        if _past_one_request(prompt):
            raise PromptFileError(f"{name} line {number} holds a prompt of more than "
                                  f"{MAX_REQUEST_TOKENS:,} words, past the {MAX_REQUEST_TOKENS:,}"
                                  " tokens one request may hold (a word is a token at least)")
        try:
            prompt.encode()
        except UnicodeEncodeError:  # JSON may escape half a surrogate pair ("\ud800")
            raise PromptFileError(f"{name} line {number} holds half a surrogate pair (an "
                                  "unpaired \\ud800 to \\udfff), which is no text") from None
        prompts.append(prompt)
    if not prompts:
        raise PromptFileError(f"prompts file {name} is empty")
    return tuple(prompts)


def _past_one_request(prompt: str) -> bool:
    """More words than one request may hold tokens, as a trace's requests are bound: counted
    (up to the bound) only in a prompt of more characters than that, a word being one at
    least."""
    if len(prompt) <= MAX_REQUEST_TOKENS:
        return False
    words = itertools.islice(_WORD.finditer(prompt), MAX_REQUEST_TOKENS + 1)
    return sum(1 for _ in words) > MAX_REQUEST_TOKENS


def first_user_prompt(obj: object) -> str | None:
    """`{"prompt"}`, OpenAI `{"messages"}` (first user message) or ShareGPT `{"conversations"}`
    (first human turn); None when the object holds none of them."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("prompt"), str):
        return obj["prompt"]
    for field, who, role, body in (("messages", ("user",), "role", "content"),
                                   ("conversations", ("human", "user"), "from", "value")):
        turns = obj.get(field)
        if isinstance(turns, list):
            for turn in turns:
                if isinstance(turn, dict) and turn.get(role) in who:
                    return _content_text(turn.get(body))
    return None


def _content_text(content: object) -> str | None:
    """A message's text: a string, or the text parts of an OpenAI content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return "\n".join(p for p in parts if isinstance(p, str)) or None
    return None
