"""A trace file read for replay (`run --trace`): its format (given or guessed, and said), its
requests in order on its own clock, the window a run takes of it, and what was left out.

The file is streamed a line at a time; only the window's requests are kept, each a small
record (a 100,000-line Mooncake trace: docs/running.md, "Replaying a trace").
"""

from __future__ import annotations

import hashlib
import itertools
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from common.readable import figure
from harness.config import MAX_RUN_REQUESTS
from harness.run.trace.formats import (
    FORMATS,
    PARSERS,
    Skipped,
    TraceError,
    TraceRequest,
    guess,
)

MAX_FILE_BYTES = 256 * 2**20  # as a prompt file's: a trace past this is refused, not read
MAX_WINDOW_REQUESTS = MAX_RUN_REQUESTS  # a window past this is no run's: refused where the
# reading reaches it, not once all of it is held


@dataclass(slots=True, frozen=True)
class Window:
    """The part of a trace a run replays: from `start_s` on the trace's clock, for
    `duration_s` (None: to its end), at most `limit` requests (None: all)."""

    start_s: float = 0.0
    duration_s: float | None = None
    limit: int | None = None

    def describe(self) -> str:
        parts = []
        if self.start_s:
            parts.append(f"from {self.start_s:g} s")
        if self.duration_s is not None:
            parts.append(f"for {self.duration_s:g} s")
        if self.limit is not None:
            parts.append(f"at most {self.limit:,} requests")
        return " ".join(parts) or "whole"


@dataclass(slots=True, frozen=True)
class Trace:
    """A trace's window, ready to schedule. `requests` keep the file's order (sorted by
    arrival first when asked); arrivals count from the window's first request."""

    path: str
    format: str
    guessed: bool  # the format was read from the file, not given
    requests: tuple[TraceRequest, ...]
    skipped: int  # rows the format leaves out (BurstGPT's failed requests)
    skipped_why: str
    sorted_lines: int  # requests that arrived out of order and were sorted (--sort-trace)
    window: Window

    @property
    def timed(self) -> bool:
        """The trace has timestamps: it can be replayed on its own clock."""
        return bool(self.requests) and self.requests[0].arrival_s is not None

    @property
    def span_s(self) -> float:
        """From the window's first arrival to its last, on the trace's clock."""
        if not self.timed:
            return 0.0
        return max(r.arrival_s or 0.0 for r in self.requests)

    @property
    def rate(self) -> float | None:
        """The window's mean request rate (requests/s on the trace's clock): its requests
        after the first over its span; None when it has no timestamps or no span."""
        span = self.span_s
        return (len(self.requests) - 1) / span if span > 0 else None

    def digest(self) -> str:
        """What the window holds, to refuse a resume on a trace that has changed."""
        h = hashlib.sha256(self.format.encode())
        for r in self.requests:
            h.update(repr((r.line, r.arrival_s, r.input_tokens, r.output_tokens, r.hash_ids,
                           r.messages, r.session)).encode())
        return h.hexdigest()[:16]

    def describe(self) -> str:
        how = "guessed from the file" if self.guessed else "as given"
        parts = [f"trace {self.path}: {self.format} ({how}), {len(self.requests):,} requests"]
        if self.window.describe() != "whole":
            parts.append(f"window {self.window.describe()}")
        if self.timed:
            parts.append(f"over {figure(self.span_s, 1)} s"
                         + (f" ({self.rate:.3g} requests/s)" if self.rate else ""))
        if self.skipped:
            parts.append(f"{self.skipped:,} rows skipped ({self.skipped_why})")
        if self.sorted_lines:
            parts.append(f"{self.sorted_lines:,} out-of-order requests sorted by arrival")
        return ", ".join(parts)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """The file's non-blank lines with their numbers (1-based), decoded as UTF-8."""
    try:
        with path.open("rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError:
                    raise TraceError(f"{path} line {number} is not UTF-8 text") from None
                if text.strip():
                    yield number, text
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror or exc}") from None


def _lines_above(path: Path, count: int) -> bool:
    """Whether the file may have more than `count` lines: its line ends counted a MiB at a
    time (a 256 MiB file in about 0.1 s), without decoding any."""
    ends = 0
    try:
        with path.open("rb") as f:
            while chunk := f.read(2**20):
                ends += chunk.count(b"\n")
                if ends >= count:
                    return True
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror or exc}") from None
    return False


def _check_file(path: Path) -> None:
    """A regular file within the size bound: a pipe or a device is refused unopened (one
    never ends, and neither reads the same again on --resume)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise TraceError(f"trace {path} does not exist") from None
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise TraceError(f"trace {path} is not a regular file (a pipe or a device cannot be "
                         "read alike again by --resume): save it to a file and give that")
    if st.st_size > MAX_FILE_BYTES:
        raise TraceError(f"trace {path} holds {st.st_size / 2**20:.0f} MiB, above the "
                         f"{MAX_FILE_BYTES // 2**20} MiB a trace may have: take a window of it "
                         "into a file of its own")


def sniff(path: str | Path, given: str = "") -> tuple[str, bool]:
    """The trace's format, and whether it has timestamps: read from its first line alone (a
    CSV's header names its timestamp column; a JSON line has one or not)."""
    path = Path(path)
    _check_file(path)
    if given and given not in FORMATS:
        raise TraceError(f"--trace-format must be one of {', '.join(FORMATS)}, not {given!r}")
    first = next(_lines(path), None)
    if first is None:
        raise TraceError(f"trace {path} is empty")
    fmt = given or guess(str(path), first[1])
    if fmt in ("azure", "burstgpt"):
        return fmt, True  # a timestamp column is part of their header
    head = next(PARSERS[fmt](str(path), [first], Skipped()), None)
    return fmt, head is not None and head.arrival_s is not None


def read(path: str | Path, given: str = "", window: Window | None = None,
         sort: bool = False) -> Trace:
    """The trace's window, checked: its lines parsed up to the window's end (a bad one names
    its line and field), arrivals in order (or all read and sorted, with `sort`), the window
    neither empty nor past MAX_WINDOW_REQUESTS. The trace's clock starts at its first request.

    A file of more lines than the bound is read once without keeping a request, to refuse
    its window at the request past the bound (its 1,000,001st) in the memory of one line,
    and then again to keep it; a window bounded by its limit, and any smaller file, is read
    once."""
    path = Path(path)
    window = window or Window()
    fmt, timed = sniff(path, given)
    if (window.limit is None or window.limit > MAX_WINDOW_REQUESTS) \
            and _lines_above(path, MAX_WINDOW_REQUESTS):
        _refuse_past_bound(_Reading(path, fmt, timed, window, sort))
    reading = _Reading(path, fmt, timed, window, sort)
    kept = (_earliest(reading.requests(), window.limit) if sort
            else list(itertools.islice(reading.requests(), window.limit)))
    if not kept:
        raise TraceError(f"{_what(path, window)} holds no request"
                         + (f" ({reading.skipped.count:,} rows skipped: {reading.skipped.why})"
                            if reading.skipped.count else ""))
    if timed and kept[0].arrival_s:  # the window's clock starts at its first request
        shift = kept[0].arrival_s
        kept = [_at(r, (r.arrival_s or 0.0) - shift) for r in kept]
    return Trace(str(path), fmt, not given, tuple(kept), reading.skipped.count,
                 reading.skipped.why, reading.unsorted, window)


@dataclass(slots=True)
class _Reading:
    """One pass over a trace file: the requests of its window's time range, and what the
    pass left out or found out of order."""

    path: Path
    fmt: str
    timed: bool
    window: Window
    sort: bool
    skipped: Skipped = field(default_factory=Skipped)
    unsorted: int = 0  # requests that arrived before one on an earlier line (sorted)

    def requests(self) -> Iterator[TraceRequest]:
        """The requests from the window's start to its end, in the file's order, each at its
        arrival after the trace's first request; out of order ones refused (or, to be
        sorted, counted and read on to the end of the file)."""
        path, window = self.path, self.window
        latest: TraceRequest | None = None  # the latest arrival so far
        origin: float | None = None
        end = None if window.duration_s is None else window.start_s + window.duration_s
        for r in PARSERS[self.fmt](str(path), _lines(path), self.skipped):
            if r.arrival_s is not None:
                if latest is not None and r.arrival_s < (latest.arrival_s or 0.0):
                    if not self.sort:
                        raise TraceError(f"{path} line {r.line}: its timestamp comes before "
                                         f"line {latest.line}'s; the trace must be in arrival "
                                         "order (or give --sort-trace to sort it)")
                    self.unsorted += 1
                else:
                    latest = r
                origin = r.arrival_s if origin is None else origin
                r = _at(r, r.arrival_s - origin)
            if self.timed and (r.arrival_s or 0.0) < window.start_s:
                continue
            if end is not None and (r.arrival_s or 0.0) >= end:
                if self.sort:
                    continue
                return
            yield r


def _refuse_past_bound(reading: _Reading) -> None:
    """Read the window without keeping it; refuse it at its request past
    MAX_WINDOW_REQUESTS."""
    past = next(itertools.islice(reading.requests(), MAX_WINDOW_REQUESTS, None), None)
    if past is not None:
        raise TraceError(f"{_what(reading.path, reading.window)} holds more than the "
                         f"{MAX_WINDOW_REQUESTS:,} requests one run may hold (line "
                         f"{past.line:,} is past them): take a window of it with "
                         "--trace-limit or --trace-duration")


def _earliest(requests: Iterable[TraceRequest], limit: int | None) -> list[TraceRequest]:
    """The first `limit` (None: all) of the requests by arrival, ties in line order: at most
    twice `limit` held while reading."""
    kept: list[TraceRequest] = []
    for r in requests:
        kept.append(r)
        if limit is not None and len(kept) >= 2 * limit:
            kept.sort(key=_by_arrival)
            del kept[limit:]
    kept.sort(key=_by_arrival)
    return kept[:limit]


def _by_arrival(r: TraceRequest) -> tuple[float, int]:
    return r.arrival_s or 0.0, r.line


def _what(path: Path, window: Window) -> str:
    return (f"the window {window.describe()} of trace {path}" if window.describe() != "whole"
            else f"trace {path}")


def _at(r: TraceRequest, arrival_s: float) -> TraceRequest:
    return TraceRequest(r.line, arrival_s, r.input_tokens, r.output_tokens, r.hash_ids,
                        r.messages, r.session)
