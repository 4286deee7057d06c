"""Control-plane calls to the server under test: is it there, which engine, its /stats.

These run outside any timed window, so plain httpx is fine here.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from harness.endpoint import Endpoint

_KNOWN_ENGINES = ("vllm", "sglang", "llamacpp", "llama.cpp", "tgi", "engram-bench", "mock")


class TargetError(RuntimeError):
    """The target cannot be benchmarked; the message is one sentence for the user."""


@dataclass(slots=True, frozen=True)
class TargetInfo:
    model: str
    engine: str


async def describe(endpoint: Endpoint, model: str | None, timeout_s: float = 10.0) -> TargetInfo:
    """Check the server answers and serves `model` (or pick its only model when None)."""
    url = endpoint.base_url.rstrip("/") + "/models"
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as http:
            resp = await http.get(url, headers=endpoint.auth_headers())
    except httpx.HTTPError as exc:
        raise TargetError(f"cannot reach {endpoint.base_url}: {_reason(exc)}") from None
    if resp.status_code in (401, 403):
        raise TargetError(f"{endpoint.base_url} refused the API key (HTTP {resp.status_code})")
    if resp.status_code == 404:  # some servers have no model list; the calibration checks
        if model is None:
            raise TargetError(f"{url} is not served, so --model must be given")
        return TargetInfo(model, _engine_from_headers(resp.headers))
    if resp.status_code != 200:
        raise TargetError(f"{url} answered HTTP {resp.status_code}, not a model list")
    try:
        entries = resp.json()["data"]
        served = tuple(str(m["id"]) for m in entries)
    except (ValueError, KeyError, TypeError):
        raise TargetError(f"{url} did not answer with an OpenAI model list") from None
    if model is None:
        if not served:
            raise TargetError(f"{endpoint.base_url} serves no models")
        model = served[0]
    elif model not in served:
        raise TargetError(
            f"model {model!r} is not served by {endpoint.base_url}; it serves: {', '.join(served)}"
        )
    owner = next((str(m.get("owned_by", "")) for m in entries if m["id"] == model), "")
    engine = owner.lower()
    if engine not in _KNOWN_ENGINES:
        engine = _engine_from_headers(resp.headers)
    return TargetInfo(model, engine)


async def fetch_stats(endpoint: Endpoint, timeout_s: float = 5.0) -> dict | None:
    """The server's own counters (GET /stats), or None when it exposes none."""
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as http:
            resp = await http.get(endpoint.server_root + "/stats", headers=endpoint.auth_headers())
        if resp.status_code != 200:
            return None
        data = resp.json()
    except (httpx.HTTPError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _engine_from_headers(headers: httpx.Headers) -> str:
    server = headers.get("server", "").lower()
    return next((e for e in _KNOWN_ENGINES if e in server), "unknown")


def _reason(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.ConnectError):
        return "connection refused or host unknown"
    if isinstance(exc, httpx.TimeoutException):
        return "no answer in time"
    return type(exc).__name__
