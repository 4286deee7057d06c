"""Where a trace has changed since a run began on it, so a resume refused on a changed trace
names the first changed line. A run stores its window's digest with the digests of up to
RUNS runs of consecutive requests beside it (a few KiB at most): the first run that differs
holds the first change, to the line for a window of up to RUNS requests. Both come from one
pass over the window. Pure: the trace is already read."""

from __future__ import annotations

import hashlib

from harness.run.trace.formats import TraceRequest
from harness.run.trace.source import Trace

RUNS = 256
_HEX = 8  # digits of a run's digest: a chance of 1 in 4e9 that a change goes unseen in it


def fingerprint(trace: Trace) -> str:
    """The window's digest, the requests per run and each run's digest, in one string."""
    size = max(1, -(-len(trace.requests) // RUNS))
    whole, runs = _digests(trace, size)
    return f"{whole} {size} {''.join(runs)}"


def changed(trace: Trace, stored: str) -> str | None:
    """None when `stored` (a fingerprint, or the window's digest alone, as a run stored before
    runs were kept has it) is this trace's; else the trace and its first changed line if
    known, e.g. "trace t.jsonl has changed at line 7"."""
    whole, _, rest = stored.partition(" ")
    size_text, _, digits = rest.partition(" ")
    if not (size_text.isdigit() and int(size_text) > 0 and digits):
        return None if whole == trace.digest() else f"trace {trace.path} has changed"
    size = int(size_text)
    now, runs = _digests(trace, size)
    if now == whole:
        return None
    old = [digits[k:k + _HEX] for k in range(0, len(digits), _HEX)]
    return f"trace {trace.path} has changed{_where(trace.requests, size, old, runs)}"


def _digests(trace: Trace, size: int) -> tuple[str, list[str]]:
    """The window's digest (its format and every request) and each run of `size` requests'."""
    whole = hashlib.sha256(trace.format.encode())
    runs = []
    for k in range(0, len(trace.requests), size):
        run = hashlib.sha256()
        for r in trace.requests[k:k + size]:
            key = _key(r)
            whole.update(key)
            run.update(key)
        runs.append(run.hexdigest()[:_HEX])
    return whole.hexdigest()[:16], runs


def _key(r: TraceRequest) -> bytes:
    return repr((r.line, r.arrival_s, r.input_tokens, r.output_tokens, r.hash_ids, r.messages,
                 r.session)).encode()


def _where(requests: tuple[TraceRequest, ...], size: int, old: list[str],
           new: list[str]) -> str:
    """" at line L", " between lines A and B", " after line L" (the window now ends sooner),
    or "" (every run alike: the trace is read in another format)."""
    first = next((k for k, (a, b) in enumerate(zip(old, new, strict=False)) if a != b),
                 min(len(old), len(new)))
    if first < len(new):
        lines = [r.line for r in requests[first * size:(first + 1) * size]]
        if first >= len(old) or len(lines) == 1:  # a run the stored window did not have
            return f" at line {lines[0]:,}"
        return f" between lines {min(lines):,} and {max(lines):,}"
    if first < len(old):
        return f" after line {requests[-1].line:,}"
    return ""
