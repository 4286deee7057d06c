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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from harness.config import ConfigError

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


def _int_field(name: str, line: int, obj: dict, field: str, minimum: int = 0) -> int:
    value = obj.get(field)
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) \
            or value < minimum:
        raise TraceError(f"{name} line {line}: {field} must be a whole number of at least "
                         f"{minimum}, not {json.dumps(value)}")
    return int(value)


def _timestamp(name: str, line: int, value: object, field: str, scale: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value < 0:
        raise TraceError(f"{name} line {line}: {field} must be a number of "
                         f"{'ms' if scale == 1e-3 else 's'} of at least 0, not "
                         f"{json.dumps(value)}")
    return float(value) * scale


def _json_object(name: str, line: int, text: str) -> dict:
    try:
        obj = json.loads(text)
    except RecursionError:
        raise TraceError(f"{name} line {line} is JSON nested too deeply to read") from None
    except ValueError:
        raise TraceError(f"{name} line {line} is not JSON") from None
    if not isinstance(obj, dict):
        raise TraceError(f"{name} line {line} is not a JSON object")
    return obj


def mooncake(name: str, lines: Lines, skipped: Skipped) -> Iterator[TraceRequest]:
    for line, text in lines:
        obj = _json_object(name, line, text)
        ids = obj.get("hash_ids", [])
        if not isinstance(ids, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise TraceError(f"{name} line {line}: hash_ids must be a list of whole numbers")
        yield TraceRequest(
            line, _timestamp(name, line, obj.get("timestamp"), "timestamp", 1e-3),
            _int_field(name, line, obj, "input_length", 1),
            _int_field(name, line, obj, "output_length", 1), tuple(ids))


def _text(name: str, line: int, obj: dict) -> tuple[dict, ...]:
    """A jsonl line's messages: `messages` as given, or `prompt` as one user message."""
    if isinstance(obj.get("prompt"), str):
        messages: object = [{"role": "user", "content": obj["prompt"]}]
    else:
        messages = obj.get("messages")
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str) for m in messages):
        raise TraceError(f"{name} line {line}: expected \"prompt\" (text) or \"messages\" (a "
                         "list of {\"role\", \"content\"} objects with text content)")
    for m in messages:
        try:
            m["content"].encode()
        except UnicodeEncodeError:  # JSON may escape half a surrogate pair ("\ud800")
            raise TraceError(f"{name} line {line} holds half a surrogate pair (an unpaired "
                             "\\ud800 to \\udfff), which is no text") from None
    return tuple({"role": m["role"], "content": m["content"]} for m in messages)


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


def _csv_rows(name: str, lines: Lines, needed: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
    """Each data row of a CSV as {column: text}, after a header holding `needed`."""
    rows = iter(lines)
    try:
        header_line, header = next(rows)
    except StopIteration:
        return
    columns = [c.strip() for c in next(csv.reader([header]))]
    missing = [c for c in needed if c not in columns]
    if missing:
        raise TraceError(f"{name} line {header_line}: the header lacks "
                         f"{', '.join(missing)} (it has {', '.join(columns)})")
    for line, text in rows:
        values = next(csv.reader([text]), [])
        if len(values) != len(columns):
            raise TraceError(f"{name} line {line}: {len(values)} fields where the header has "
                             f"{len(columns)}")
        yield line, dict(zip(columns, (v.strip() for v in values), strict=True))


def _csv_int(name: str, line: int, row: dict, field: str, minimum: int) -> int:
    text = row[field]
    if not text.isdigit() or int(text) < minimum:
        raise TraceError(f"{name} line {line}: {field} must be a whole number of at least "
                         f"{minimum}, not {text!r}")
    return int(text)


def azure(name: str, lines: Lines, skipped: Skipped) -> Iterator[TraceRequest]:
    first: datetime | None = None
    for line, row in _csv_rows(name, lines, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        try:
            when = datetime.fromisoformat(row["TIMESTAMP"])
        except ValueError:
            raise TraceError(f"{name} line {line}: TIMESTAMP must be a date and time such as "
                             f"2023-11-16 18:15:46.680590, not {row['TIMESTAMP']!r}") from None
        if first is None:
            first = when
        try:
            arrival = (when - first).total_seconds()
        except TypeError:  # one with a time zone, one without
            raise TraceError(f"{name} line {line}: TIMESTAMP {row['TIMESTAMP']!r} mixes "
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
                             f"0, not {row['Timestamp']!r}")
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
            obj = json.loads(text)
        except (ValueError, RecursionError):
            obj = None
        if isinstance(obj, dict):
            if "hash_ids" in obj or "input_length" in obj:
                return "mooncake"
            if "messages" in obj or "prompt" in obj:
                return "jsonl"
    else:
        columns = {c.strip() for c in next(csv.reader([text]), [])}
        if "ContextTokens" in columns:
            return "azure"
        if "Request tokens" in columns:
            return "burstgpt"
    raise TraceError(f"cannot tell the format of trace {name} from its first line: give "
                     f"--trace-format ({', '.join(FORMATS)})")
