"""The table's start state set through a serving host's agent (`run --table-state`): one POST
of `engram-bench agent`'s /table/drop or /table/warm beside the /metrics URL it was given, and
its JSON answer. Plain urllib, no proxy, as host_scrape; never on the timing loop."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from harness.wire.host_scrape import HostScrapeError

TIMEOUT_S = 600.0  # warming a large table reads it from disk: minutes on a slow one
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def action_url(metrics_url: str, action: str, budget_bytes: int | None = None) -> str:
    """The agent's /table/<action> URL beside its /metrics URL."""
    parts = urlsplit(metrics_url)
    path = parts.path.rsplit("/", 1)[0] + f"/table/{action}"
    query = f"budget_bytes={budget_bytes}" if budget_bytes is not None else ""
    return urlunsplit((parts.scheme, parts.netloc, path, query, ""))


def set_state(metrics_url: str, action: str, budget_bytes: int | None = None,
              timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """POSTs drop or warm to the agent at `metrics_url`: its answer (runners.host_agent.
    table_state.StateResult's fields); HostScrapeError with the agent's own sentence where it
    refuses (an agent given no table), or why it did not answer."""
    request = urllib.request.Request(action_url(metrics_url, action, budget_bytes), data=b"",
                                     method="POST")
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            return dict(json.loads(response.read()))
    except urllib.error.HTTPError as exc:
        try:
            why = str(json.loads(exc.read()).get("error") or f"HTTP {exc.code}")
        except (ValueError, AttributeError):
            why = f"HTTP {exc.code}: not an engram-bench agent with a table"
        raise HostScrapeError(why, answered=True) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise HostScrapeError(str(getattr(exc, "reason", exc)), answered=False) from None
