"""A serving host's kernel counters over HTTP (`run --host-metrics`): one GET of
`engram-bench agent`'s /metrics, or a node_exporter's, timed on our clocks and read as a
HostSample. Plain urllib, run in the scraper's process (harness.wire.scraper) or before the
run sends anything, never next to the timing loop. No proxy, as for the server, and no
credentials: the server's API key is not the agent's to see, and a URL carrying a password
is refused, never sent.
"""

from __future__ import annotations

import http.client
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from harness.results.host_level import Scrape
from harness.results.host_sample import HostSample, NotHostMetrics, parse_host_sample

TIMEOUT_S = 2.0  # a scrape; a level waits this long at most for a host gone quiet
MAX_BYTES = 16 << 20  # a node_exporter's whole /metrics is ~0.1-0.5 MB
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class HostScrapeError(Exception):
    """A host's metrics could not be read; `answered`: something answered, but not with them.
    The message is a short clause for a sentence."""

    def __init__(self, why: str, answered: bool) -> None:
        super().__init__(why)
        self.answered = answered


def check_url(text: str) -> str:
    """An http(s) URL with a host and no credentials; ValueError (one sentence) otherwise."""
    url = text.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{text!r} is not an http(s) URL such as http://10.0.0.5:9477/metrics")
    if "@" in parts.netloc:
        raise ValueError(f"{parts.scheme}://{parts.hostname}... was given with credentials "
                         "before its host, which engram-bench does not send: give it without")
    try:
        parts.port  # noqa: B018 - raises on a port that is no number
    except ValueError:
        raise ValueError(f"{text!r} has an invalid port") from None
    return url


def parse_urls(text: str) -> tuple[str, ...]:
    """--host-metrics URL[,URL...]: one URL per node, each checked, none twice."""
    urls = tuple(check_url(part) for part in text.split(",") if part.strip())
    if not urls:
        raise ValueError("needs at least one URL, e.g. http://127.0.0.1:9477/metrics")
    if len(set(urls)) < len(urls):
        raise ValueError("names a URL twice: give each node's URL once")
    return urls


def read(url: str, timeout_s: float = TIMEOUT_S) -> HostSample:
    """One GET of `url`, read as a host sample; HostScrapeError saying why not."""
    try:
        with _OPENER.open(url, timeout=timeout_s) as response:
            body = response.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise HostScrapeError(f"HTTP {exc.code}", answered=True) from None
    except http.client.HTTPException as exc:
        raise HostScrapeError(f"not an HTTP answer ({type(exc).__name__})", answered=True) \
            from None
    except (urllib.error.URLError, OSError) as exc:  # URLError wraps a connect's OSError
        reason = getattr(exc, "reason", exc)
        why = (f"no answer within {timeout_s:g} s" if isinstance(reason, TimeoutError)
               else getattr(reason, "strerror", None) or str(reason))
        raise HostScrapeError(why, answered=False) from None
    if len(body) > MAX_BYTES:
        raise HostScrapeError(f"an answer over {MAX_BYTES >> 20} MiB", answered=True)
    try:
        return parse_host_sample(body.decode("utf-8", "replace"))
    except NotHostMetrics as exc:
        raise HostScrapeError(str(exc), answered=True) from None


def scrape(url: str, timeout_s: float = TIMEOUT_S) -> Scrape:
    """One timed GET: the sample, or the reason it failed (never raises)."""
    sent_wall, sent = time.time_ns(), time.monotonic_ns()
    try:
        sample: HostSample | None = read(url, timeout_s)
        error = None
    except HostScrapeError as exc:
        sample, error = None, str(exc)
    return Scrape(sent, time.monotonic_ns(), sent_wall, sample, error)


def refusal(url: str, exc: HostScrapeError) -> str:
    """The sentence that stops a run before it sends anything."""
    if exc.answered:
        return (f"--host-metrics {url} answers, but not with an engram-bench agent's or a "
                f"node_exporter's metrics ({exc})")
    return (f"--host-metrics {url} does not answer ({exc}): start `engram-bench agent` on "
            "that host (docs/host-agent.md), or leave the URL out")
