"""The trace formats `run --trace` reads, one parser each, line by line (a trace is streamed,
never read whole): each line becomes a TraceRequest or a TraceError naming the file, its line
and the field.

- `mooncake`: JSONL, `timestamp` (ms after the first request), `input_length`,
  `output_length`, `hash_ids` (one id per block of --trace-block-tokens tokens; equal ids,
  equal blocks: a shared prefix), as Mooncake's FAST'25 traces are published;
- `azure`: Azure's LLM inference traces (2023, 2024), CSV with `TIMESTAMP` (a date and time),
  `ContextTokens`, `GeneratedTokens`;
- `burstgpt`: BurstGPT, CSV with `Timestamp` (s), `Request tokens`, `Response tokens`, `Log
  Type`; a row with 0 response tokens is a failed request in the source, skipped and counted;
- `jsonl`: engram-bench's own, `messages` (OpenAI chat messages) or `prompt`, and optionally
  `timestamp` (s), `session_id` (a session's turns are sent in order, each after the previous
  one's answer, with that conversation before it) and `max_tokens`.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TypeGuard

import orjson

from common.readable import PLAIN_BELOW, figure
from harness.config import MAX_REQUEST_TOKENS, ConfigError

FORMATS = ("mooncake", "azure", "burstgpt", "jsonl")


class TraceError(ConfigError):
    """A trace that cannot be replayed; one sentence naming the file (and line, and field)."""


@dataclass(slots=True, frozen=True)
class TraceRequest:
    """One request of a trace, as the trace gives it. `arrival_s`: seconds after the trace's
    clock starts (None: the trace has no timestamps); `input_tokens` is None where the trace
    gives the prompt's text instead (jsonl)."""

    line: int
    arrival_s: float | None
    input_tokens: int | None
    output_tokens: int | None
    hash_ids: tuple[int, ...] = ()
    messages: tuple[dict, ...] = ()  # jsonl: the messages this turn sends
    session: str | None = None


@dataclass(slots=True)
class Skipped:
    """Rows a parser left out, and why (BurstGPT's failed requests)."""

    count: int = 0
    why: str = ""


Lines = Iterable[tuple[int, str]]


class _Digits(str):
    """A JSON integer of more digits than Python converts to an int (4,300): no length or
    timestamp, refused as one, shown by its size."""


def _shown(value: object) -> str:
    """A refused JSON value as the sentence shows it: as the file wrote it, but a number past
    PLAIN_BELOW in scientific notation and text cut short."""
    if isinstance(value, _Digits):
        return figure(Decimal(value))
    if _finite(value) and abs(value) >= PLAIN_BELOW:
        return figure(value)
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _finite(value: object) -> TypeGuard[int | float]:
    """A number, not NaN or infinity (nor a bool): an integer of any size is one."""
    return not isinstance(value, bool) and (
        isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)))


def _length(name: str, line: int, field: str, value: object, minimum: int) -> int:
    """A count of tokens, from `minimum` up to what one request may hold: a trace's length
    past that is no request a served model takes (the longest context one states is 10M
    tokens), and one past INT32 would not fit the stored request it is recorded in, clipped
    or not."""
    if type(value) is int and minimum <= value <= MAX_REQUEST_TOKENS:  # the common case
        return value
    if not _finite(value) or value != int(value) \
            or not minimum <= value <= MAX_REQUEST_TOKENS:
        raise _length_error(name, line, field, minimum, _shown(value))
    return int(value)


def _length_error(name: str, line: int, field: str, minimum: int, shown: str) -> TraceError:
    return TraceError(f"{name} line {line}: {field} must be a whole number from {minimum} to "
                      f"{MAX_REQUEST_TOKENS:,}, not {shown}")


def _int_field(name: str, line: int, obj: dict, field: str, minimum: int) -> int:
    return _length(name, line, field, obj.get(field), minimum)


def _timestamp(name: str, line: int, value: object, field: str, scale: float) -> float:
    if not _finite(value) or not 0 <= value <= sys.float_info.max:
        raise TraceError(f"{name} line {line}: {field} must be a number of "
                         f"{'ms' if scale == 1e-3 else 's'} of at least 0, not "
                         f"{_shown(value)}")
    return float(value) * scale


_AS_NINES = bytes.maketrans(b"0123456789", b"9" * 10)
_LONG_NUMBER = b"9" * 19  # past 64 bits orjson reads an integer as a float


def _loads(text: str) -> object:
    """A line's JSON: orjson's (several times faster) where it reads the line as the standard
    library does; else the standard library's, whose leniencies (NaN, a lone surrogate
    escape, an integer past 64 bits or past Python's digits) the checks after it name. A run
    of 19 digits is looked for in the line's bytes with every digit made a 9 (a regular
    expression took 0.4 s on a line of a million hash ids, this 20 ms)."""
    if _LONG_NUMBER not in text.encode().translate(_AS_NINES):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text, parse_int=_int_or_digits)


def _int_or_digits(digits: str) -> int | _Digits:
    try:
        return int(digits)
    except ValueError:  # past Python's limit on an integer's digits
        return _Digits(digits)


def _json_object(name: str, line: int, text: str) -> dict:
    try:
        obj = _loads(text)
    except RecursionError:
        raise TraceError(f"{name} line {line} is JSON nested too deeply to read") from None
    except ValueError:
        raise TraceError(f"{name} line {line}{_cr_hint(text) or ' is not JSON'}") from None
    if not isinstance(obj, dict):
        raise TraceError(f"{name} line {line} is not a JSON object")
    return obj


def _cr_hint(text: str) -> str:
    """Why a line may not parse: its file ends lines with a carriage return alone, so all of
    it reads as one line."""
    if "\r" in text.rstrip("\r\n"):
        return (" holds carriage returns mid-line: a file whose lines end in CR alone must be "
                "converted to LF or CRLF line endings")
    return ""


def mooncake(name: str, lines: Lines, skipped: Skipped) -> Iterator[TraceRequest]:
    for line, text in lines:
        obj = _json_object(name, line, text)
        ids = obj.get("hash_ids", [])
        if not isinstance(ids, list) or not set(map(type, ids)) <= {int}:  # no bool
            raise TraceError(f"{name} line {line}: hash_ids must be a list of whole numbers")
        arrival = _timestamp(name, line, obj.get("timestamp"), "timestamp", 1e-3)
        tokens = _int_field(name, line, obj, "input_length", 1)
        if len(ids) > tokens:  # a block holds one token at least
            raise TraceError(f"{name} line {line}: hash_ids names {len(ids):,} blocks, more "
                             f"than its input_length of {tokens:,} tokens can hold")
        yield TraceRequest(line, arrival, tokens,
                           _int_field(name, line, obj, "output_length", 1), tuple(ids))


def _text(name: str, line: int, obj: dict) -> tuple[dict, ...]:
    """A jsonl line's messages: `messages` as given, or `prompt` as one user message."""
    prompt = obj.get("prompt")
    if isinstance(prompt, str):
        messages: tuple[dict, ...] = ({"role": "user", "content": prompt},)
    else:
        given = obj.get("messages")
        if not isinstance(given, list) or not given or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str)
                and isinstance(m.get("content"), str) for m in given):
            raise TraceError(f"{name} line {line}: expected \"prompt\" (text) or \"messages\" "
                             "(a list of {\"role\", \"content\"} objects with text content)")
        messages = tuple({"role": m["role"], "content": m["content"]} for m in given)
    for m in messages:
        try:
            m["content"].encode()
        except UnicodeEncodeError:  # JSON may escape half a surrogate pair ("\ud800")
            raise TraceError(f"{name} line {line} holds half a surrogate pair (an unpaired "
                             "\\ud800 to \\udfff), which is no text") from None
    return messages


def jsonl(name: str, lines: Lines, skipped: Skipped) -> Iterator[TraceRequest]:
    timed: bool | None = None
    for line, text in lines:
        obj = _json_object(name, line, text)
        has_time = obj.get("timestamp") is not None
        if timed is None:
            timed = has_time
        elif has_time != timed:
            raise TraceError(f"{name} line {line}: timestamp must be given on every line or "
                             "on none (the first line " + ("has" if timed else "has none") + ")")
        session = obj.get("session_id")
        if session is not None and not isinstance(session, str | int):
            raise TraceError(f"{name} line {line}: session_id must be text or a number")
        output = (_int_field(name, line, obj, "max_tokens", 1)
                  if obj.get("max_tokens") is not None else None)
        yield TraceRequest(
            line, _timestamp(name, line, obj["timestamp"], "timestamp", 1.0) if has_time else None,
            None, output, messages=_text(name, line, obj),
            session=None if session is None else str(session))


def _csv_fields(name: str, line: int, text: str, columns: list[str] | None = None) -> list[str]:
    """A CSV line's fields: split at its commas where it quotes nothing (as the csv module
    would, several times faster), else by the csv module, whose refusals (a field past its
    limit, a carriage return mid-line) are one sentence naming the field (`columns`: the
    header's, where known)."""
    row = text.rstrip("\r\n")
    if '"' not in row and "\r" not in row:
        return row.split(",")
    try:
        return next(csv.reader([row]), [])
    except csv.Error as exc:
        if hint := _cr_hint(text):
            raise TraceError(f"{name} line {line}{hint}") from None
        limit = csv.field_size_limit()
        where = [k for k, piece in enumerate(row.split(",")) if len(piece) > limit]
        if where and "larger than field limit" in str(exc):
            field = (columns[where[0]] if columns and where[0] < len(columns)
                     else f"field {where[0] + 1}")
            raise TraceError(f"{name} line {line}: {field} holds more than {limit:,} "
                             "characters, past what a CSV field may hold") from None
        raise TraceError(f"{name} line {line} is not CSV ({exc})") from None


def _csv_rows(name: str, lines: Lines, needed: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
    """Each data row of a CSV as {column: text}, after a header holding `needed`."""
    rows = iter(lines)
    try:
        header_line, header = next(rows)
    except StopIteration:
        return
    columns = [c.strip() for c in _csv_fields(name, header_line, header)]
    missing = [c for c in needed if c not in columns]
    if missing:
        raise TraceError(f"{name} line {header_line}: the header lacks "
                         f"{', '.join(missing)} (it has {_cut(', '.join(columns))})")
    for line, text in rows:
        values = _csv_fields(name, line, text, columns)
        if len(values) != len(columns):
            raise TraceError(f"{name} line {line}: {len(values)} fields where the header has "
                             f"{len(columns)}")
        yield line, dict(zip(columns, [v.strip() for v in values], strict=True))


def _cut(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def _csv_int(name: str, line: int, row: dict, field: str, minimum: int) -> int:
    """A count of tokens, as _length bounds it: ASCII digits (str.isdigit() takes "²" too,
    which int() refuses), too many of them shown by their size, never converted (Python
    converts 4,300 at most)."""
    text = row[field]
    if not (text.isascii() and text.isdigit()):
        raise _length_error(name, line, field, minimum, _cut(repr(text)))
    if len(digits := text.lstrip("0")) > 18:
        raise _length_error(name, line, field, minimum, figure(Decimal(digits)))
    if not minimum <= (value := int(text)) <= MAX_REQUEST_TOKENS:
        raise _length_error(name, line, field, minimum, _shown(value))
    return value


def azure(name: str, lines: Lines, skipped: Skipped) -> Iterator[TraceRequest]:
    first: datetime | None = None
    for line, row in _csv_rows(name, lines, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        try:
            when = datetime.fromisoformat(row["TIMESTAMP"])
        except ValueError:
            raise TraceError(f"{name} line {line}: TIMESTAMP must be a date and time such as "
                             "2023-11-16 18:15:46.680590, not "
                             f"{_cut(repr(row['TIMESTAMP']))}") from None
        if first is None:
            first = when
        try:
            arrival = (when - first).total_seconds()
        except TypeError:  # one with a time zone, one without
            raise TraceError(f"{name} line {line}: TIMESTAMP {_cut(repr(row['TIMESTAMP']))} mixes "
                             "times with and without a time zone") from None
        yield TraceRequest(line, arrival, _csv_int(name, line, row, "ContextTokens", 1),
                           _csv_int(name, line, row, "GeneratedTokens", 1))


def burstgpt(name: str, lines: Lines, skipped: Skipped) -> Iterator[TraceRequest]:
    skipped.why = "failed in the source: 0 response tokens"
    for line, row in _csv_rows(name, lines,
                               ("Timestamp", "Request tokens", "Response tokens", "Log Type")):
        try:
            stamp = float(row["Timestamp"])
        except ValueError:
            stamp = math.nan
        if not (math.isfinite(stamp) and stamp >= 0):
            raise TraceError(f"{name} line {line}: Timestamp must be a number of s of at least "
                             f"0, not {_cut(repr(row['Timestamp']))}")
        output = _csv_int(name, line, row, "Response tokens", 0)
        if output == 0:
            skipped.count += 1
            continue
        yield TraceRequest(line, stamp,
                           _csv_int(name, line, row, "Request tokens", 1), output)


PARSERS = {"mooncake": mooncake, "azure": azure, "burstgpt": burstgpt, "jsonl": jsonl}


def guess(name: str, first_line: str) -> str:
    """The format of a trace from its first line (a CSV header, or a JSON object's keys)."""
    text = first_line.strip()
    if text.startswith("{"):
        try:
            obj = _loads(text)
        except (ValueError, RecursionError):
            obj = None
        if isinstance(obj, dict):
            if "hash_ids" in obj or "input_length" in obj:
                return "mooncake"
            if "messages" in obj or "prompt" in obj:
                return "jsonl"
    else:
        try:
            columns = {c.strip() for c in _csv_fields(name, 1, text)}
        except TraceError:
            columns = set()
        if "ContextTokens" in columns:
            return "azure"
        if "Request tokens" in columns:
            return "burstgpt"
    if hint := _cr_hint(first_line):
        raise TraceError(f"trace {name} line 1{hint}")
    raise TraceError(f"cannot tell the format of trace {name} from its first line: give "
                     f"--trace-format ({', '.join(FORMATS)})")
