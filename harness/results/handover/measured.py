"""What a run measured, as its report states it: the target without credentials, the machine,
the server's own settings, and the command that runs it again."""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from harness.config import RunConfig, StoredRun
from harness.results.metrics import Targets
from harness.results.run_row import RunRow

# RunConfig field -> `engram-bench run` flag, for the fields a command repeats when they are
# not the default ("" flag: a yes/no whose flag is the name given)
FLAGS = {"api": "--api", "mode": "--mode", "levels": "--levels", "rounds": "--rounds",
         "input_tokens": "--input-tokens", "output_tokens": "--output-tokens",
         "request_timeout_s": "--request-timeout", "connect_timeout_s": "--connect-timeout",
         "stall_timeout_s": "--stall-timeout", "warmup": "--warmup", "seed": "--seed",
         "temperature": "--temperature", "label": "--label", "device": "--device",
         "table_placement": "--placement", "prompts": "--prompts",
         "search": "--search", "max_concurrency": "--max-concurrency", "rates": "--rates",
         "arrival": "--arrival", "duration_s": "--duration", "repeat": "--repeat",
         "profile": "--profile", "duty_cycle": "--duty-cycle", "think_s": "--think-time",
         "think_dist": "--think-dist", "turns": "--turns", "keep_going": "--keep-going",
         "token_times": "--token-times", "trace": "--trace", "trace_format": "--trace-format",
         "speedups": "--speedup", "trace_block_tokens": "--trace-block-tokens",
         "sort_trace": "--sort-trace", "trace_start_s": "--trace-start",
         "trace_duration_s": "--trace-duration", "trace_limit": "--trace-limit",
         "input_scale": "--input-scale", "max_input_tokens": "--max-input-tokens",
         "max_output_tokens": "--max-output-tokens", "lengths_from": "--lengths-from",
         "workers": "--workers", "ray": "--ray", "host_metrics": "--host-metrics",
         "ca_bundle": "--ca-bundle", "insecure": "--insecure", "table_state": "--table-state",
         "warm_budget_gb": "--warm-budget-gb", "idle_s": "--idle"}


def public_url(url: str | None) -> str:
    """A URL without what may be a credential: user:password@, the query (?key=...) and the
    fragment are dropped."""
    if not url:
        return ""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _value(value: object) -> str:
    if isinstance(value, tuple | list):
        return ",".join(public_url(v) if isinstance(v, str) and "://" in v else f"{v:g}"
                        if isinstance(v, float) else str(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def reproduce(run: RunRow, targets: Targets) -> str:
    """The `engram-bench run` command of a run's stored settings: the target (or the server
    it started: its device and its engine's flags), then every setting not at its default,
    then the targets it was judged by; '' where the stored settings are not this version's,
    or the run started a server and was stored before its flags were."""
    config = StoredRun.from_json(run.config).config
    if config is None or config.server_flags is None:
        return ""
    words = ["engram-bench", "run"]
    if not config.server_args:
        words += ["--url", public_url(config.url)]
    words += config.server_flags
    if config.model:
        words += ["--model", config.model]
    defaults = RunConfig(url="", model="")
    for name, flag in FLAGS.items():
        value = getattr(config, name)
        if value == getattr(defaults, name) and not (name == "device" and config.server_args):
            continue
        if isinstance(value, bool):
            words += [flag] if value else []
        else:
            words += [flag, _value(value)]
    if not config.server_metrics:
        words.append("--no-server-metrics")
    base = Targets()
    for name, flag in (("tps_min", "--tps-min"), ("ttft_max_ms", "--ttft-max-ms"),
                       ("statistic", "--statistic"), ("ttft_of", "--ttft-of"),
                       ("chat_factor", "--chat-factor"),
                       ("agentic_factor", "--agentic-factor")):
        if getattr(targets, name) != getattr(base, name):
            words += [flag, _value(getattr(targets, name))]
    return shlex.join(words)


def machine(run: RunRow) -> str:
    """Where the harness ran: host name, platform, CPUs and memory, as the run stored them."""
    try:
        info = json.loads(run.host or "null")
    except json.JSONDecodeError:
        info = None
    if not isinstance(info, dict):
        return ""
    memory = info.get("memory_kb")
    parts = [str(info.get(k)) for k in ("hostname", "platform") if info.get(k)]
    if info.get("cpus"):
        parts.append(f"{info['cpus']} CPUs")
    if isinstance(memory, int | float):
        parts.append(f"{memory / 1024**2:.1f} GiB memory")
    if info.get("python"):
        parts.append(f"Python {info['python']}")
    return ", ".join(parts)


def server_settings(run: RunRow) -> dict[str, str]:
    """The server's own account of itself at the start (its /stats: engine, version, table,
    offload), scalar entries only, nested ones named by their path."""
    server = StoredRun.from_json(run.config).server or {}
    out: dict[str, str] = {}

    def walk(prefix: str, value: object) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, str | int | float | bool) and not _secret(prefix):
            out[prefix] = public_url(value) if isinstance(value, str) and "://" in value \
                else _value(value)

    walk("", server)
    return out


def _secret(name: str) -> bool:
    return any(word in name.lower() for word in ("key", "token_secret", "password", "secret",
                                                  "auth"))


def targets_of(summary_targets: Mapping[str, object]) -> Targets:
    """The Targets a summary states (its slo left out: the command repeats the four rules)."""
    fields = {f.name for f in dataclasses.fields(Targets)} - {"slo", "min_goodput"}
    return Targets(**{k: v for k, v in summary_targets.items() if k in fields})  # type: ignore[arg-type]
