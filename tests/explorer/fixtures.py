"""A deterministic results database for the explorer tests and its benchmark.

Two runs on the same device, table in memory vs on NVMe; levels 1, 2, 4, 8 with 10 rounds.
Per-request TTFT and TPS follow fixed per-level means with a seeded spread, so the capacity
figures are known: run `mem` passes C=1,2,4 (Max C 4, a lower bound: 5-7 untested), run `nvme`
passes C=1,2 and `run --search` probed C=3, which fails (Max C 2, exact).
Server counters per level: run `nvme` has the bundled server's current /stats keys (what each
level adds is `nvme_growth`, the gauges after it `nvme_gauges`); run `mem` has the older keys.
Server metrics (/metrics) per level: run `mem` has `server_metric_rows`, in vLLM's names plus
the bundled server's own; run `nvme` has none.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from pathlib import Path

from harness.config import RunConfig, StoredRun
from harness.records import RequestRecord
from harness.results.client_check import ClientCheck
from harness.results.run_row import RunRow
from harness.results.server_metrics import MetricRow
from harness.results.store import Store
from harness.results.token_timing import stream_timing

T0 = 1_790_000_000.0
LEVELS = (1, 2, 4, 8)
# (mean TTFT ms, mean TPS) per level
PROFILES = {
    "mem": {1: (210, 36.0), 2: (300, 29.0), 4: (450, 22.0), 8: (800, 14.0)},
    "nvme": {1: (230, 33.0), 2: (330, 24.0), 3: (420, 19.0), 4: (520, 18.5), 8: (900, 12.0)},
}
PROBES = {"mem": (), "nvme": (3,)}  # levels the Max C search added after the sweep


def stored(**knobs) -> str:
    """runs.config as a real run stores it: its knobs, and prompts calibrated to 118 words."""
    config = RunConfig(url="http://127.0.0.1:8000/v1", model="qwen-mini", **knobs)
    return StoredRun(config, prompt_words=118).to_json()


# Table pages each nvme level read from disk (of 16 requested per token)
MISSED_PAGES = {1: 8000, 2: 12000, 4: 16000, 8: 24000}


def nvme_growth(c: int) -> dict:
    """What level C adds to the bundled server's cumulative /stats counters."""
    tokens, missed = 1000 * c, MISSED_PAGES[c]
    return {
        "tokens": tokens, "prefill_tokens": tokens // 2, "decode_tokens": tokens // 2,
        "steps": 100 + 50 * c, "step_ms": 5000.0, "compute_ms": 3000.0,
        "engram_wait_ms": 100.0 * c, "engram_wait_ms_by_layer": {"2": 100.0 * c},
        "hash_ms": 200.0, "sample_ms": 300.0, "emit_ms": 100.0, "prefill_gather_ms": 40.0 * c,
        "decode_gather_ms": 400.0, "gather_cpu_ms": 50.0 * c, "evict_cpu_ms": 5.0 * c,
        "rows_requested": 16 * tokens, "unique_rows_requested": 12 * tokens,
        "bytes_requested": 2560 * tokens, "pages_requested": 16 * tokens,
        "disk_read_bytes": 4096 * missed, "page_faults_major": missed,
        "page_faults_minor": 100 * c, "blockdev_reads": missed + 500,
        "blockdev_read_ms": 0.75 * (missed + 500), "uptime_s": 10.0,
    }


def nvme_gauges(c: int) -> dict:
    """The bundled server's /stats gauges after level C (2 GiB table, 344 MiB budget)."""
    return {
        "table_bytes": 2 << 30, "table_budget_bytes": 344 << 20, "cache_ratio": 344 / 2048,
        "table_resident_bytes": 40 * c << 20, "table_resident_peak_bytes": (40 * c + 8) << 20,
        "table_mapping_rss_bytes": 40 * c << 20, "placement": "nvme", "io_mode": "mmap",
        "cache_state": "cold",
    }


def _grow(totals: dict, growth: dict) -> dict:
    return {k: _grow(totals.get(k, {}), v) if isinstance(v, dict) else totals.get(k, 0) + v
            for k, v in growth.items()}


def write_nvme_stats(store: Store, run_id: str) -> None:
    """Cumulative snapshots around each level, from a non-zero start (a warmup ran first).
    At C=8 the block device's counters could not be read (null)."""
    before = {**nvme_growth(1), **nvme_gauges(1)}
    for c in LEVELS:
        after = {**_grow(before, nvme_growth(c)), **nvme_gauges(c)}
        if c == 8:
            after.update(blockdev_reads=None, blockdev_read_ms=None)
        store.write_server_stats(run_id, c, before, after)
        before = after


def write_old_stats(store: Store, run_id: str, placement: str) -> None:
    """The keys an older bundled server exposed on /stats."""
    for c in LEVELS:
        before = {"tokens": 0, "step_ms": 0.0, "stall_ms": 0.0, "engram_bytes_read": 0,
                  "page_faults_major": 0}
        after = {"tokens": 1000 * c, "step_ms": 5000.0, "stall_ms": 50.0 * c,
                 "engram_bytes_read": 2560 * 1000 * c, "page_faults_major": 10 * c,
                 "placement": placement, "mapping_resident_bytes": 1 << 20}
        store.write_server_stats(run_id, c, before, after)


SERVER_TTFT_GAP_MS = 12.0  # server TTFT mean = the client's level mean - this
VLLM_LABELS = json.dumps({"engine": "0", "model_name": "qwen-mini"})


def server_metric_rows(c: int) -> list[MetricRow]:
    """Level C of run `mem` as the scraper stores it (seconds as exposed)."""
    ttft_s = (PROFILES["mem"][c][0] - SERVER_TTFT_GAP_MS) / 1000
    offload = json.dumps({"engine": "0", "model_name": "qwen-mini", "transfer_type": "GPU_to_CPU"})

    def row(name: str, kind: str, stat: str, value: float, labels: str = VLLM_LABELS
            ) -> MetricRow:
        return MetricRow(name, labels, kind, stat, value)

    ttft, queue = "vllm:time_to_first_token_seconds", "vllm:request_queue_time_seconds"
    return [
        row(ttft, "histogram", "count", 10 * c), row(ttft, "histogram", "mean", ttft_s),
        row(ttft, "histogram", "p50", ttft_s - 0.005), row(ttft, "histogram", "p90", ttft_s + 0.02),
        row(ttft, "histogram", "p99", ttft_s + 0.04),
        row(queue, "histogram", "count", 10 * c), row(queue, "histogram", "mean", 0.01 * c),
        row(queue, "histogram", "p50", 0.008 * c),
        row("vllm:num_requests_running", "gauge", "mean", 0.9 * c),
        row("vllm:num_requests_running", "gauge", "max", c),
        row("engram_running_requests", "gauge", "mean", 0.9 * c, "{}"),  # the same, own name
        row("engram_running_requests", "gauge", "max", c, "{}"),
        row("vllm:num_requests_waiting", "gauge", "mean", 0.0),
        row("vllm:num_requests_waiting", "gauge", "max", 0.0),
        row("vllm:kv_cache_usage_perc", "gauge", "mean", 0.05 * c),
        row("vllm:kv_cache_usage_perc", "gauge", "max", 0.06 * c),
        row("vllm:num_preemptions_total", "counter", "delta", 2.0 if c == 8 else 0.0),
        row("vllm:prefix_cache_queries_total", "counter", "delta", 1280.0 * c),
        row("vllm:prefix_cache_hits_total", "counter", "delta", 160.0 * c),
        row("vllm:kv_offload_total_bytes_total", "counter", "delta", 4096.0 * c, offload),
        row("engram_disk_read_bytes_total", "counter", "delta", 65536.0 * c, "{}"),
        row("process_cpu_seconds_total", "counter", "delta", 1.5, "{}"),
    ]


def records(kind: str, rounds: int = 10, seed: int = 1, levels: tuple[int, ...] = LEVELS,
            start: float = T0) -> list[RequestRecord]:
    rng = random.Random(f"{kind}-{seed}")
    out = []
    for c in levels:
        ttft_mean, tps_mean = PROFILES[kind][c]
        for rnd in range(rounds):
            for w in range(c):
                ttft = ttft_mean + rng.uniform(-20, 20)
                tps = tps_mean + rng.uniform(-1, 1)
                latency = 128 / tps * 1000
                out.append(RequestRecord(
                    request_id=f"{kind}-c{c}-r{rnd}-w{w}", concurrency=c, round=rnd, worker=w,
                    sent_at=start + rnd * latency / 1000, ttft_ms=ttft, latency_ms=latency,
                    output_tokens=128, input_tokens=128, chunks=128, max_gap_ms=40.0,
                    finish_reason="length", http_status=200))
        start += rounds * 10
    # tps as stored is output_tokens / latency: the spread above keeps the means exact enough
    return out


def build(path: Path) -> dict[str, str]:
    """Write the fixture database; returns {kind: run_id}."""
    store = Store(path)
    store.initialise()
    ids = {}
    for kind, placement in (("mem", "device"), ("nvme", "nvme")):
        run_id = f"fixture-{kind}"
        store.create_run(RunRow(
            run_id=run_id, device="spark", engine="engram-bench", model="qwen-mini",
            table_placement=placement, target_url="http://127.0.0.1:8000/v1",
            api="chat", mode="closed", levels=list(LEVELS), rounds=10,
            input_tokens=128, output_tokens=128, measured_input_tokens=128,
            label=f"fixture {kind}", config=json.dumps({"prompt_words": 118}),
        ))
        store.write_requests(run_id, records(kind))
        for c in PROBES[kind]:  # as `run --search` does: the probe is recorded before it runs
            store.add_probe(run_id, c)
            store.write_requests(run_id, records(kind, seed=2, levels=(c,), start=T0 + 1000))
        if kind == "nvme":
            write_nvme_stats(store, run_id)
        else:
            write_old_stats(store, run_id, placement)
            for c in LEVELS:
                store.write_server_metrics(run_id, c, server_metric_rows(c))
        store.finish_run(run_id, "complete")
        ids[kind] = run_id
    return ids


# An open-loop rate run (`run --mode rate`): per rate (req/s), mean TTFT ms, mean TPS and the
# send lag (ms) every request had. Sustainable rate 2 req/s (4 fails both targets); at 4 req/s
# the p99 send lag is past 10 ms, so the load generator is flagged there.
RATE_RUN = "fixture-rate"
RATES = (0.5, 1.0, 2.0, 4.0)
RATE_PROFILE = {0.5: (250, 34.0, 0.4), 1.0: (300, 31.0, 0.6), 2.0: (450, 25.0, 1.2),
                4.0: (1400, 16.0, 15.0)}
RATE_DURATION_S = 20


def rate_records(seed: int = 1, start: float = T0 + 5000) -> list[RequestRecord]:
    """Requests of the rate run: concurrency 0, `rate` and `scheduled_at` set."""
    rng = random.Random(f"rate-{seed}")
    out = []
    for rate in RATES:
        ttft_mean, tps_mean, lag_ms = RATE_PROFILE[rate]
        for k in range(int(rate * RATE_DURATION_S)):
            scheduled = start + k / rate
            tps = tps_mean + rng.uniform(-1, 1)
            out.append(RequestRecord(
                request_id=f"rate-r{rate:g}-{k}", concurrency=0, round=0, worker=k,
                sent_at=scheduled + lag_ms / 1000, ttft_ms=ttft_mean + rng.uniform(-20, 20),
                latency_ms=128 / tps * 1000, output_tokens=128, input_tokens=128, chunks=128,
                max_gap_ms=40.0, finish_reason="length", http_status=200, rate=rate,
                scheduled_at=scheduled))
        start += RATE_DURATION_S + 30
    return out


def add_rate_run(store: Store) -> str:
    """Write the rate run into an initialised store; returns its run id."""
    store.create_run(RunRow(
        run_id=RATE_RUN, device="spark", engine="engram-bench", model="qwen-mini",
        table_placement="device", target_url="http://127.0.0.1:8000/v1", api="chat",
        mode="rate", levels=[], rounds=1, input_tokens=128, output_tokens=128,
        measured_input_tokens=128, label="fixture rate",
        config=stored(mode="rate", levels=(), rates=RATES, duration_s=RATE_DURATION_S,
                      arrival="constant"),
    ))
    store.write_requests(RATE_RUN, rate_records())
    store.finish_run(RATE_RUN, "complete")
    return RATE_RUN


def build_with_rate(path: Path) -> dict[str, str]:
    """The fixture database plus the rate run; returns {kind: run_id}, `rate` included."""
    ids = build(path)
    ids["rate"] = add_rate_run(Store(path))
    return ids


# Simulated users (`run --mode users`, profile chat) and the closed run of the same setup that
# pairs with it: per user count U (closed: per C), mean TTFT ms and mean TPS. Every user thinks
# ~3x its last request (duty cycle ~0.25). U=4 and U=6 pass; U=12 fails the TTFT target only
# (Max users 6, a lower bound: U=7-11 untested). The closed run passes C=1,2 (Max C 2, exact),
# so the chat estimate is 2 x 4 = 8 users and the measured factor 6 / 2 = 3 users per Max C.
USERS_RUN, PAIRED_RUN, TURNS_RUN = "fixture-users", "fixture-closed", "fixture-turns"
USERS_LEVELS = (4, 6, 12)
USERS_PROFILE = {4: (300, 30.0), 6: (500, 25.0), 12: (1500, 21.0)}
PAIRED_PROFILE = {1: (250, 32.0), 2: (400, 26.0), 4: (700, 18.0)}
USERS_REQUESTS = 5  # requests per user and level
USERS_SETUP = {"device": "rtx-pro-6000", "engine": "engram-bench", "model": "qwen-mini",
               "table_placement": "host", "target_url": "http://127.0.0.1:8000/v1",
               "api": "chat", "input_tokens": 128, "output_tokens": 128,
               "measured_input_tokens": 128}
# A multi-turn closed run (`--turns 3`): each turn sends the whole conversation so far, so the
# context grows by TURN_GROWTH tokens a turn, and the server reports all but the new question
# as cached; TTFT grows with the tokens it had to prefill.
TURNS, TURN_LEVELS, CONVERSATIONS, TURN_GROWTH = 3, (1, 2), 4, 256


def users_records(seed: int = 1, start: float = T0 + 9000) -> list[RequestRecord]:
    """Each user's requests at each level, one after another with a think time between
    (none after its last): think ~3x the request, so the duty cycle is ~0.25."""
    rng = random.Random(f"users-{seed}")
    out = []
    for u in USERS_LEVELS:
        ttft_mean, tps_mean = USERS_PROFILE[u]
        for user in range(u):
            clock = start
            for k in range(USERS_REQUESTS):
                tps = tps_mean + rng.uniform(-0.5, 0.5)
                latency = 128 / tps * 1000
                last = k == USERS_REQUESTS - 1
                think = None if last else 3 * latency * rng.uniform(0.95, 1.05)
                out.append(RequestRecord(
                    request_id=f"users-u{u}-{user}-{k}", concurrency=u, round=k, worker=user,
                    sent_at=clock, ttft_ms=ttft_mean + rng.uniform(-20, 20), latency_ms=latency,
                    output_tokens=128, input_tokens=128, chunks=128, max_gap_ms=40.0,
                    finish_reason="length", http_status=200, think_ms=think))
                clock += (latency + (think or 0)) / 1000
        start += 200
    return out


def paired_records(start: float = T0 + 8000) -> list[RequestRecord]:
    """The closed sweep of the users run's setup: 10 rounds per level."""
    rng = random.Random("paired")
    out = []
    for c, (ttft_mean, tps_mean) in PAIRED_PROFILE.items():
        for rnd in range(10):
            for w in range(c):
                tps = tps_mean + rng.uniform(-0.5, 0.5)
                out.append(RequestRecord(
                    request_id=f"paired-c{c}-r{rnd}-w{w}", concurrency=c, round=rnd, worker=w,
                    sent_at=start + rnd * 5, ttft_ms=ttft_mean + rng.uniform(-20, 20),
                    latency_ms=128 / tps * 1000, output_tokens=128, input_tokens=128,
                    chunks=128, max_gap_ms=40.0, finish_reason="length", http_status=200))
        start += 100
    return out


def turn_prompt(turn: int) -> int:
    """Prompt tokens of a turn: the first prompt plus TURN_GROWTH per earlier turn."""
    return 128 + (turn - 1) * TURN_GROWTH


def turn_cached(turn: int) -> int:
    """Cached prompt tokens the server reports at a turn: all the earlier turns sent."""
    return (turn - 1) * TURN_GROWTH


def turn_ttft(c: int, turn: int) -> float:
    """TTFT of a turn: a base, plus the level's queueing, plus the uncached tokens' prefill."""
    return 150 + 20 * c + 0.25 * (turn_prompt(turn) - turn_cached(turn)) + 10 * turn


def turns_records(start: float = T0 + 12000) -> list[RequestRecord]:
    """The multi-turn run's requests: per level, CONVERSATIONS conversations per worker of
    TURNS turns each (round = conversation x TURNS + turn - 1)."""
    out = []
    for c in TURN_LEVELS:
        for conv in range(CONVERSATIONS):
            for w in range(c):
                for turn in range(1, TURNS + 1):
                    latency = 128 / (30.0 - c) * 1000
                    rnd = conv * TURNS + turn - 1
                    out.append(RequestRecord(
                        request_id=f"turns-c{c}-{conv}-w{w}-t{turn}", concurrency=c, round=rnd,
                        worker=w, sent_at=start + rnd * 5, ttft_ms=turn_ttft(c, turn),
                        latency_ms=latency, output_tokens=128, input_tokens=turn_prompt(turn),
                        chunks=128, max_gap_ms=40.0, finish_reason="length", http_status=200,
                        turn=turn, cached_tokens=turn_cached(turn)))
        start += 100
    return out


def add_users_runs(store: Store) -> dict[str, str]:
    """Write the paired closed run, the users run and the multi-turn run into an initialised
    store; returns {kind: run_id} for `paired`, `users` and `turns`."""
    store.create_run(RunRow(
        run_id=PAIRED_RUN, **USERS_SETUP, mode="closed", levels=list(PAIRED_PROFILE), rounds=10,
        label="fixture closed", config=json.dumps({"prompt_words": 118})))
    store.write_requests(PAIRED_RUN, paired_records())
    store.finish_run(PAIRED_RUN, "complete")
    store.create_run(RunRow(
        run_id=USERS_RUN, **USERS_SETUP, mode="users", levels=list(USERS_LEVELS),
        rounds=USERS_REQUESTS, label="fixture users",
        config=stored(mode="users", levels=USERS_LEVELS, rounds=USERS_REQUESTS,
                      profile="chat")))
    store.write_requests(USERS_RUN, users_records())
    store.finish_run(USERS_RUN, "complete")
    store.create_run(RunRow(
        run_id=TURNS_RUN, device="spark", engine="engram-bench", model="qwen-mini",
        table_placement="device", target_url="http://127.0.0.1:8000/v1", api="chat",
        mode="closed", levels=list(TURN_LEVELS), rounds=CONVERSATIONS * TURNS,
        input_tokens=128, output_tokens=128, measured_input_tokens=turn_prompt(2),
        label="fixture turns",
        config=stored(levels=TURN_LEVELS, rounds=CONVERSATIONS * TURNS, turns=TURNS)))
    store.write_requests(TURNS_RUN, turns_records())
    store.finish_run(TURNS_RUN, "complete")
    return {"paired": PAIRED_RUN, "users": USERS_RUN, "turns": TURNS_RUN}


def build_with_users(path: Path) -> dict[str, str]:
    """The fixture database plus the users, paired closed and multi-turn runs."""
    ids = build(path)
    return {**ids, **add_users_runs(Store(path))}


# A speculative server measured with --token-times: 4-token chunks every 10 ms (with jitter),
# per-chunk usage; the harness's self-check found C=8 client-bound.
TIMED_RUN = "fixture-timed"
TIMED_LEVELS = (1, 2, 4, 8)


def timed_records(start: float = T0 + 9000) -> list[RequestRecord]:
    rng = random.Random("timed")
    out = []
    for c in TIMED_LEVELS:
        for rnd in range(3):
            for w in range(c):
                ttft_ns = int((40 + 10 * c + rng.uniform(0, 10)) * 1e6)
                offsets = [ttft_ns]
                for _ in range(31):
                    offsets.append(offsets[-1] + int((10 + rng.uniform(-2, 4)) * 1e6))
                tokens = [4] * 32
                timing = stream_timing(offsets, tokens, 128)
                latency_ms = offsets[-1] / 1e6 + 1.0
                out.append(RequestRecord(
                    request_id=f"timed-c{c}-r{rnd}-w{w}", concurrency=c, round=rnd, worker=w,
                    sent_at=start + rnd * latency_ms / 1000 + w * 0.002, ttft_ms=ttft_ns / 1e6,
                    latency_ms=latency_ms, output_tokens=128, input_tokens=128, chunks=32,
                    max_gap_ms=max(b - a for a, b in itertools.pairwise(offsets))
                    / 1e6, finish_reason="length", http_status=200,
                    chunk_offsets_ns=offsets, chunk_tokens=tokens,
                    **{f.name: getattr(timing, f.name) for f in dataclasses.fields(timing)}))
        start += 10
    return out


def build_with_token_times(path: Path) -> dict[str, str]:
    """The fixture database plus a run stored with --token-times."""
    ids = build(path)
    store = Store(path)
    store.create_run(RunRow(
        run_id=TIMED_RUN, device="spark", engine="vllm", model="qwen-mini", table_placement="",
        target_url="http://127.0.0.1:8000/v1", api="chat", mode="closed",
        levels=list(TIMED_LEVELS), rounds=3, input_tokens=128, output_tokens=128,
        measured_input_tokens=128, label="fixture timed", config=json.dumps({})))
    store.write_requests(TIMED_RUN, timed_records(), token_times=True)
    for c in TIMED_LEVELS:
        starved = c == 8  # its loop waited for a CPU half the time: late by up to 30 ms
        store.write_client_check(TIMED_RUN, c, ClientCheck(
            2.5 if starved else 0.2, 30.0 if starved else 0.6, 60.0 if starved else 1.2, 0.3,
            0, 0.5 if starved else 0.02))
    store.finish_run(TIMED_RUN, "complete")
    return {**ids, "timed": TIMED_RUN}


# A timed trace replay (`run --trace`): a 60 s window of 30 requests (0.5 req/s on the
# trace's clock, one every 2 s, the burst at trace time 20-30 s holding 10 of them) replayed
# at speedups 1, 2, 4 and 8; per speedup, mean TTFT ms and mean TPS. 1-4 pass, 8 fails on TPS.
TRACE_RUN = "fixture-trace"
TRACE_SPEEDUPS = (1.0, 2.0, 4.0, 8.0)
TRACE_PROFILE = {1.0: (200, 34.0), 2.0: (240, 30.0), 4.0: (400, 24.0), 8.0: (900, 15.0)}
TRACE_ARRIVALS = tuple(sorted([*(2.0 * k for k in range(10)), *(20 + k for k in range(10)),
                               *(40 + 2.0 * k for k in range(10))]))


def trace_records(start: float = T0 + 20000) -> list[RequestRecord]:
    """Requests of the trace run: concurrency 0, the rate each speedup offers, `speedup`,
    and the trace's lengths beside what was asked (every other request shares one block)."""
    base_rate = (len(TRACE_ARRIVALS) - 1) / TRACE_ARRIVALS[-1]
    out = []
    for speedup in TRACE_SPEEDUPS:
        ttft, tps = TRACE_PROFILE[speedup]
        for k, arrival in enumerate(TRACE_ARRIVALS):
            scheduled = start + arrival / speedup
            out.append(RequestRecord(
                request_id=f"trace-x{speedup:g}-k{k}", concurrency=0, round=0, worker=k,
                sent_at=scheduled + 0.0005, ttft_ms=ttft, latency_ms=64 / tps * 1000,
                output_tokens=64, input_tokens=101, chunks=64, finish_reason="length",
                http_status=200, rate=base_rate * speedup, speedup=speedup,
                scheduled_at=scheduled, trace_line=k + 1, trace_input_tokens=5000,
                trace_output_tokens=64, input_tokens_requested=100,
                output_tokens_requested=64, trace_prefix_tokens=50 * (k % 2)))
        start += TRACE_ARRIVALS[-1] / speedup + 30
    return out


def build_with_trace(path: Path) -> dict[str, str]:
    """The fixture database plus the trace run; returns {kind: run_id}, `trace` included."""
    ids = build(path)
    store = Store(path)
    store.create_run(RunRow(
        run_id=TRACE_RUN, device="spark", engine="engram-bench", model="qwen-mini",
        table_placement="nvme", target_url="http://127.0.0.1:8000/v1", api="chat",
        mode="trace", levels=[], rounds=10, input_tokens=128, output_tokens=128,
        measured_input_tokens=101, label="fixture trace",
        config=stored(mode="trace", levels=(), trace="/traces/mooncake.jsonl",
                      speedups=TRACE_SPEEDUPS, input_scale=0.02)))
    store.write_requests(TRACE_RUN, trace_records())
    store.finish_run(TRACE_RUN, "complete")
    ids["trace"] = TRACE_RUN
    return ids
