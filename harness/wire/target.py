"""Control-plane calls to the server under test: is it there, which engine, its /stats.

They go through the sweep's own connection code (`client.get`), so the pre-flight check takes
the route the measured requests take: the same TLS settings, and no proxy for either.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from harness.wire.client import Response, WireError, get
from harness.wire.endpoint import Endpoint

_KNOWN_ENGINES = ("vllm", "sglang", "llamacpp", "llama.cpp", "tgi", "engram-bench", "mock")


class TargetError(RuntimeError):
    """The target cannot be benchmarked; the message is one sentence for the user."""


@dataclass(slots=True, frozen=True)
class TargetInfo:
    model: str
    engine: str
    max_model_len: int | None = None  # the model's context, where /v1/models tells (vLLM)


async def describe(endpoint: Endpoint, model: str | None, timeout_s: float = 10.0) -> TargetInfo:
    """Check the server answers and serves `model` (or pick its only model when None).

    EndpointError (before any connection) when a proxy variable would apply to the target.
    """
    url = endpoint.base_url.rstrip("/") + "/models"
    try:
        resp = await get(endpoint, endpoint.prefix + "/models", timeout_s)
    except WireError as exc:
        raise TargetError(f"cannot reach {endpoint.base_url}: {exc}") from None
    if resp.status in (401, 403):
        raise TargetError(f"{endpoint.base_url} refused the API key (HTTP {resp.status})")
    if resp.status == 404:  # some servers have no model list; the calibration checks
        if model is None:
            raise TargetError(f"{url} is not served, so --model must be given")
        return TargetInfo(model, _engine_from_headers(resp))
    if resp.status != 200:
        raise TargetError(f"{url} answered HTTP {resp.status}, not a model list")
    try:
        entries = json.loads(resp.body)["data"]
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
    entry = next(m for m in entries if m["id"] == model)
    engine = str(entry.get("owned_by", "")).lower()
    if engine not in _KNOWN_ENGINES:
        engine = _engine_from_headers(resp)
    context = entry.get("max_model_len")
    return TargetInfo(model, engine,
                      context if type(context) is int and context > 0 else None)


async def kv_pool_tokens(endpoint: Endpoint, timeout_s: float = 5.0) -> int | None:
    """Tokens the server's KV pool holds, from vLLM's info gauge `vllm:cache_config_info`
    (labels num_gpu_blocks x block_size; the bundled server exposes the same), or None."""
    try:
        resp = await get(endpoint, endpoint.root_path + "/metrics", timeout_s)
        if resp.status != 200:
            return None
        families = text_string_to_metric_families(resp.body.decode("utf-8", "replace"))
        for family in families:
            for sample in family.samples:
                if sample.name == "vllm:cache_config_info":
                    blocks = int(sample.labels.get("num_gpu_blocks") or 0)
                    size = int(sample.labels.get("block_size") or 0)
                    return blocks * size or None
    except (WireError, ValueError, IndexError, KeyError, TypeError):
        return None
    return None


async def fetch_stats(endpoint: Endpoint, timeout_s: float = 5.0) -> dict | None:
    """The server's own counters (GET /stats), or None when it exposes none."""
    try:
        resp = await get(endpoint, endpoint.root_path + "/stats", timeout_s)
        if resp.status != 200:
            return None
        data = json.loads(resp.body)
    except (WireError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _engine_from_headers(resp: Response) -> str:
    server = resp.headers.get("server", "").lower()
    return next((e for e in _KNOWN_ENGINES if e in server), "unknown")
