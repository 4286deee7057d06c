"""Server metrics: parsing and per-level aggregation of /metrics text, the engines' names, the
scraping process against a tiny exposition server, and whole runs with and without /metrics."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

from harness.mock_server import MockConfig, MockServer, ThreadedMockServer
from harness.results.server_metrics import (
    MetricRow,
    NotPrometheus,
    aggregate,
    canonical,
    histogram_quantile,
    level_figures,
    parse,
)
from harness.results.store import Store
from harness.wire.endpoint import Endpoint
from harness.wire.scraper import Scraper
from tests.helpers import Exposition, run_cli

DATA = Path(__file__).resolve().parent / "data"
INF = float("inf")
VLLM = 'engine="0",model_name="tiny-llama"'


def scaled(text: str, factor: float) -> str:
    """The exposition with every sample value times `factor`: counters and histograms grow,
    cumulative buckets stay monotonic, and a histogram's quantiles do not change."""
    def line(s: str) -> str:
        if not s or s.startswith("#"):
            return s
        head, value = s.rsplit(" ", 1)
        return f"{head} {float(value) * factor!r}"
    return "\n".join(line(s) for s in text.splitlines()) + "\n"


def fixture(name: str) -> str:
    return (DATA / name).read_text()


def rows_of(text: str) -> list[MetricRow]:
    """A level whose start was every value of `text` halved, and whose end is `text`."""
    return aggregate([parse(scaled(text, 0.5)), parse(text)])


def stat(rows: list[MetricRow], name: str, which: str, labels: str | None = None) -> float:
    found = [r.value for r in rows if r.name == name and r.stat == which
             and (labels is None or json.loads(r.labels) == json.loads(labels))]
    assert len(found) == 1, (name, which, found)
    return found[0]


# -- aggregation ----------------------------------------------------------------------------

def test_counter_delta_is_its_growth_over_the_level():
    rows = rows_of(fixture("vllm.prom"))
    assert stat(rows, "vllm:prefix_cache_queries_total", "delta") == 2000
    assert stat(rows, "process_cpu_seconds_total", "delta") == 21.25
    queries = next(r for r in rows if r.name == "vllm:prefix_cache_queries_total")
    assert (queries.kind, json.loads(queries.labels)) == (
        "counter", {"engine": "0", "model_name": "tiny-llama"})


def test_counter_born_during_the_level_counts_from_zero_and_one_that_went_back_is_dropped():
    start = parse("# TYPE a_total counter\na_total 10\n")
    end = parse("# TYPE a_total counter\na_total 4\n# TYPE b_total counter\nb_total{x=\"1\"} 7\n")
    rows = aggregate([start, end])
    assert [(r.name, r.stat, r.value) for r in rows] == [("b_total", "delta", 7.0)]


def test_counters_need_two_snapshots_and_gauges_one():
    rows = aggregate([parse("# TYPE a_total counter\na_total 3\n# TYPE g gauge\ng 2\n")])
    assert [(r.name, r.stat, r.value) for r in rows] == [("g", "mean", 2.0), ("g", "max", 2.0)]


def test_gauge_mean_and_max_over_every_snapshot_of_the_level():
    snapshots = [parse(f"# TYPE vllm:num_requests_running gauge\n"
                       f"vllm:num_requests_running{{{VLLM}}} {v}\n") for v in (0, 6, 4, 2)]
    rows = aggregate(snapshots)
    assert stat(rows, "vllm:num_requests_running", "mean") == 3.0
    assert stat(rows, "vllm:num_requests_running", "max") == 6.0


def test_histogram_rows_come_from_the_bucket_deltas():
    """Deltas of the TTFT buckets (le 0.01 .. +Inf): 1, 2, 10, 19, 20, 20; 20 observations
    summing to 1.0 s. p50: rank 10 is the top of the (0.02, 0.04] bucket -> 0.04; p90: rank
    18, 8 of the 9 in (0.04, 0.08] -> 0.04 + 0.04 x 8/9; p99: rank 19.8, 0.8 of the 1 in
    (0.08, 0.16] -> 0.144."""
    rows = rows_of(fixture("vllm.prom"))
    name = "vllm:time_to_first_token_seconds"
    assert stat(rows, name, "count") == 20
    assert stat(rows, name, "mean") == pytest.approx(0.05)
    assert stat(rows, name, "p50") == pytest.approx(0.04)
    assert stat(rows, name, "p90") == pytest.approx(0.04 + 0.04 * 8 / 9)
    assert stat(rows, name, "p99") == pytest.approx(0.144)
    assert {r.kind for r in rows if r.name == name} == {"histogram"}
    assert "le" not in json.loads(next(r.labels for r in rows if r.name == name))


def test_a_histogram_without_observations_in_the_level_has_only_its_count():
    text = fixture("vllm.prom")
    rows = aggregate([parse(text), parse(text)])
    assert [r.stat for r in rows if r.name == "vllm:e2e_request_latency_seconds"] == ["count"]
    assert stat(rows, "vllm:e2e_request_latency_seconds", "count") == 0


@pytest.mark.parametrize(("q", "buckets", "expected"), [
    (0.5, [(0.1, 4), (0.2, 8), (INF, 8)], 0.1),  # rank 4: the top of the first bucket
    (0.25, [(0.1, 4), (0.2, 8), (INF, 8)], 0.05),  # the first bucket starts at 0
    (0.75, [(0.1, 4), (0.2, 8), (INF, 8)], 0.15),
    (0.5, [(0.1, 0), (0.2, 0), (INF, 5)], 0.2),  # in +Inf: the highest finite bound
    (0.5, [(-1.0, 2), (0.0, 2), (INF, 2)], -1.0),  # a first bound <= 0 is returned as is
    (0.5, [(0.1, 4), (0.2, 3), (INF, 8)], 0.1),  # non-monotonic counts are made monotonic
    (0.5, [(0.1, 0), (INF, 0)], None),  # no observations
    (0.5, [(INF, 3)], None),  # a single bucket
    (0.5, [(0.1, 2), (0.2, 3)], None),  # no +Inf bucket
])
def test_histogram_quantile_as_prometheus_computes_it(q, buckets, expected):
    assert histogram_quantile(q, buckets) == (
        expected if expected is None else pytest.approx(expected))


def test_creation_times_summaries_and_non_finite_values_are_left_out():
    text = fixture("vllm.prom") + (
        "# TYPE rpc_seconds summary\nrpc_seconds{quantile=\"0.5\"} 0.2\nrpc_seconds_count 3\n"
        "rpc_seconds_sum 0.6\n# TYPE temp gauge\ntemp NaN\n")
    names = {name for name, _, _ in parse(text)}
    assert "vllm:num_preemptions_created" not in names
    assert not {"rpc_seconds", "rpc_seconds_count", "temp"} & names


def test_untyped_samples_are_counters_when_named_total():
    kinds = {name: kind for name, _, kind in parse("requests_total 3\nqueue_depth 2\n")}
    assert kinds == {"requests_total": "counter", "queue_depth": "gauge"}


@pytest.mark.parametrize("body", [fixture("not_prometheus.html"), '{"requests": 3}', "ok"])
def test_text_that_is_not_prometheus_is_refused(body):
    with pytest.raises(NotPrometheus):
        parse(body)


# -- names ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "key"), [
    ("vllm:num_requests_running", "running"),
    ("vllm_num_requests_running", "running"),
    ("sglang:num_running_reqs", "running"),
    ("sglang_num_running_reqs", "running"),
    ("engram_running_requests", "running"),
    ("sglang_num_queue_reqs", "waiting"),
    ("vllm:gpu_cache_usage_perc", "kv_usage"),
    ("vllm:kv_cache_usage_perc", "kv_usage"),
    ("sglang:token_usage", "kv_usage"),
    ("vllm:num_preemptions_total", "preemptions"),
    ("vllm:num_preemptions", "preemptions"),
    ("vllm:time_per_output_token_seconds", "itl"),
    ("sglang:time_per_output_token", "itl"),
    ("vllm:request_queue_time_seconds", "queue_time"),
    ("vllm:kv_offload_stores_skipped_total", "offload"),
    ("engram_disk_read_bytes_total", "offload"),
    ("vllm:prompt_tokens_total", None),
    ("process_cpu_seconds_total", None),
    ("my_vllm:num_requests_running", None),
])
def test_engine_names_map_to_canonical_keys(name, key):
    assert canonical(name) == key


VLLM_FIGURES = {
    "running_mean": 3.0, "running_max": 4.0, "waiting_mean": 1.5, "waiting_max": 2.0,
    "kv_usage_mean": 0.375, "kv_usage_max": 0.5, "preemptions": 3.0,
    "prefix_hit_rate": 0.25,  # 500 hits of 2000 queried tokens in the level
    "ttft_count": 20, "ttft_p50_ms": 40.0, "ttft_p99_ms": 144.0, "ttft_mean_ms": 50.0,
    "itl_p50_ms": 17.5, "itl_mean_ms": 20.0,  # deltas 50, 150, 195, 200: rank 100 mid-bucket 2
    "queue_time_p50_ms": 1.0, "queue_time_mean_ms": 10.0,
    "e2e_p50_ms": 3000.0, "e2e_mean_ms": 3000.0,
}
SGLANG_FIGURES = {
    "running_max": 6.0, "waiting_max": 4.0, "kv_usage_max": 0.8, "preemptions": 4.0,
    "prefix_hit_rate": 0.225,  # its own gauge, 0.15 then 0.3
    "ttft_p50_ms": 40.0, "itl_p50_ms": 17.5, "queue_time_p50_ms": 1.0, "e2e_mean_ms": 3000.0,
}


@pytest.mark.parametrize(("file", "expected"), [
    ("vllm.prom", {**VLLM_FIGURES,
                   "offload: vllm:kv_offload_total_bytes{transfer_type=GPU_to_CPU}": 4096.0,
                   "offload: vllm:kv_offload_total_bytes{transfer_type=CPU_to_GPU}": 1024.0}),
    ("vllm_legacy.prom", {"running_max": 3.0, "kv_usage_max": 0.25, "preemptions": 1.0,
                          "prefix_hit_rate": 0.25, "itl_p50_ms": 17.5, "itl_mean_ms": 20.0}),
    ("sglang_colon.prom", SGLANG_FIGURES),
    ("sglang_underscore.prom", SGLANG_FIGURES),
    # the bundled server: vLLM's names preferred to its own for the same figure (not summed)
    ("engram.prom", {"running_max": 8.0, "waiting_max": 2.0, "ttft_p50_ms": 40.0,
                     "offload: engram_disk_read_bytes": 32768.0,
                     "offload: engram_bytes_requested": 10240.0,
                     "offload: engram_page_faults_major": 8.0}),
    # speculative decoding: the level's deltas (half of each counter) give 250 of 400 draft
    # tokens accepted over 100 steps; SGLang's gauge is averaged over the level (1.6 -> 3.2)
    ("vllm_spec_decode.prom", {"spec_acceptance_rate": 250 / 400,
                               "spec_mean_accepted_length": 1 + 250 / 100}),
    ("sglang_spec.prom", {"spec_mean_accepted_length": (1.6 + 3.2) / 2}),
    ("engram_own.prom", {"running_max": 8.0, "waiting_mean": 1.5,
                         "offload: engram_disk_read_bytes": 32768.0}),
])
def test_level_figures_read_each_engines_names(file, expected):
    figures = level_figures(rows_of(fixture(file)))
    assert {k: figures.get(k) for k in expected} == pytest.approx(expected)


def test_level_figures_have_only_what_the_server_exposes():
    figures = level_figures(rows_of(fixture("engram_own.prom")))
    assert set(figures) == {"running_mean", "running_max", "waiting_mean", "waiting_max",
                            "offload: engram_disk_read_bytes"}


def test_series_of_several_engines_add_up_and_fractions_average():
    def engines(running: tuple[int, int], usage: tuple[float, float], ttft: tuple) -> str:
        """Two engines' series of each family, grouped under its TYPE line."""
        name = "vllm:time_to_first_token_seconds"
        families = {"vllm:num_requests_running gauge": [], "vllm:kv_cache_usage_perc gauge": [],
                    f"{name} histogram": []}
        for e in (0, 1):
            n, total = ttft[e]
            families["vllm:num_requests_running gauge"].append(
                f'vllm:num_requests_running{{engine="{e}"}} {running[e]}')
            families["vllm:kv_cache_usage_perc gauge"].append(
                f'vllm:kv_cache_usage_perc{{engine="{e}"}} {usage[e]}')
            families[f"{name} histogram"] += [
                f'{name}_bucket{{engine="{e}",le="0.1"}} {n}',
                f'{name}_bucket{{engine="{e}",le="+Inf"}} {n}',
                f'{name}_count{{engine="{e}"}} {n}', f'{name}_sum{{engine="{e}"}} {total}']
        return "".join(f"# TYPE {family}\n" + "\n".join(lines) + "\n"
                       for family, lines in families.items())

    figures = level_figures(aggregate([
        parse(engines((0, 0), (0.0, 0.0), ((0, 0), (0, 0)))),
        parse(engines((2, 4), (0.2, 0.6), ((3, 0.3), (1, 0.5)))),
    ]))
    assert figures["running_mean"] == 3.0 and figures["running_max"] == 6.0
    assert figures["kv_usage_mean"] == pytest.approx(0.2) and figures["kv_usage_max"] == 0.6
    assert figures["ttft_count"] == 4 and figures["ttft_mean_ms"] == pytest.approx(200.0)


# -- the scraping process -------------------------------------------------------------------

@pytest.fixture
def exposition() -> Iterator[Callable[..., Exposition]]:
    servers: list[Exposition] = []

    def start(*args: object, **kwargs: object) -> Exposition:
        servers.append(Exposition(*args, **kwargs))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def scrape_level(endpoint: Endpoint, seconds: float) -> tuple[list[str], list[MetricRow],
                                                              list[str]]:
    async def level() -> tuple[list[str], list[MetricRow], list[str]]:
        scraper = Scraper(endpoint)
        try:
            started = await scraper.start()
            await asyncio.sleep(seconds)
            scraped = await scraper.stop()
            return started, scraped.rows, scraped.notes
        finally:
            scraper.close()
    return asyncio.run(level())


def test_the_scraper_takes_start_end_and_half_second_snapshots_off_the_timing_process(
        exposition):
    """Served under the base URL's root (/engine/v1 -> /engine/metrics), with the API key."""
    text = fixture("vllm.prom")  # its values times the scrape number: counters move
    server = exposition(lambda n: scaled(text, n), path="/engine/metrics")
    endpoint = Endpoint(f"http://127.0.0.1:{server.port}/engine/v1", api_key="secret")
    started, rows, stopped = scrape_level(endpoint, 1.3)
    n = server.scrapes  # start, one every 0.5 s, end: the values were times 1 .. n
    assert n >= 3 and started == stopped == []
    assert set(server.auth) == {"Bearer secret"}
    assert stat(rows, "vllm:prefix_cache_queries_total", "delta") == 4000 * (n - 1)
    assert stat(rows, "vllm:num_requests_running", "max") == 4 * n
    assert stat(rows, "vllm:num_requests_running", "mean") == pytest.approx(4 * (n + 1) / 2)
    assert stat(rows, "vllm:time_to_first_token_seconds", "count") == 40 * (n - 1)
    assert stat(rows, "vllm:time_to_first_token_seconds", "p50") == pytest.approx(0.04)


@pytest.mark.parametrize(("body", "status", "said"), [
    (fixture("not_prometheus.html"), 200, "warning: no server metrics: {url} is not Prometheus"),
    ("gone", 404, "no server metrics: {url} answered HTTP 404"),
])
def test_a_metrics_page_that_cannot_be_used_is_said_once_and_not_asked_again(
        exposition, body, status, said):
    server = exposition(lambda n: body, status=status)
    started, rows, stopped = scrape_level(Endpoint(f"http://127.0.0.1:{server.port}/v1"), 1.2)
    url = f"http://127.0.0.1:{server.port}/metrics"
    assert len(started) == 1 and started[0].startswith(said.format(url=url))
    assert rows == [] and stopped == []
    assert server.scrapes == 1


# -- storage --------------------------------------------------------------------------------

def test_a_level_measured_again_replaces_its_rows(tmp_path):
    store = Store(tmp_path / "b.duckdb")
    store.initialise()
    first = [MetricRow("a_total", "{}", "counter", "delta", 1.0)]
    again = [MetricRow("g", "{}", "gauge", "mean", 2.0), MetricRow("g", "{}", "gauge", "max", 3.0)]
    store.write_server_metrics("r", 1, first)
    store.write_server_metrics("r", 2, first)
    store.write_server_metrics("r", 1, again)
    assert stored(store.path) == [(1, "g", "{}", "gauge", "max", 3.0),
                                  (1, "g", "{}", "gauge", "mean", 2.0),
                                  (2, "a_total", "{}", "counter", "delta", 1.0)]


# -- whole runs -----------------------------------------------------------------------------

TTFT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)


class MetricsMock(MockServer):
    """The fake server with a /metrics in vLLM's names, from what it served: requests
    answered, requests in flight, and its own TTFT (first token written - body read)."""

    def __init__(self, config: MockConfig) -> None:
        super().__init__(config)
        self.running = 0
        self.scrapes = 0

    async def _dispatch(self, method, path, headers, body, writer) -> bool:
        if path == "/metrics":
            self.scrapes += 1
            data = self.exposition().encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
            return True
        if method != "POST":
            return await super()._dispatch(method, path, headers, body, writer)
        self.running += 1
        try:
            return await super()._dispatch(method, path, headers, body, writer)
        finally:
            self.running -= 1

    def exposition(self) -> str:
        ttfts = [t.first_write - t.body_read for t in self.timings if t.first_write is not None]
        lines = ["# TYPE vllm:num_requests_running gauge",
                 f'vllm:num_requests_running{{model_name="mock"}} {self.running}',
                 "# TYPE vllm:request_success_total counter",
                 f'vllm:request_success_total{{model_name="mock"}} {self.requests_seen}',
                 "# TYPE vllm:time_to_first_token_seconds histogram"]
        for le in (*TTFT_BUCKETS, INF):
            bound = "+Inf" if le == INF else repr(le)
            count = sum(t <= le for t in ttfts)
            lines.append(f'vllm:time_to_first_token_seconds_bucket{{le="{bound}",'
                         f'model_name="mock"}} {count}')
        lines += [f'vllm:time_to_first_token_seconds_count{{model_name="mock"}} {len(ttfts)}',
                  f'vllm:time_to_first_token_seconds_sum{{model_name="mock"}} {sum(ttfts)}']
        return "\n".join(lines) + "\n"


@pytest.fixture
def metrics_mock() -> Iterator[ThreadedMockServer]:
    threaded = ThreadedMockServer(MockConfig(ttft_ms=5, itl_ms=1))
    threaded.server = MetricsMock(threaded.server.config)
    with threaded:
        yield threaded


def stored(db: Path) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute("SELECT concurrency, name, labels, kind, stat, value "
                           "FROM server_metrics ORDER BY concurrency, name, stat").fetchall()


RUN = ("--levels", "1,2", "--rounds", "3", "--output-tokens", "4")


def test_a_run_stores_each_levels_server_metrics_and_leaves_warmup_out(metrics_mock, tmp_path):
    db = tmp_path / "b.duckdb"
    proc = run_cli("run", "--url", metrics_mock.url, "--db", str(db), *RUN, "--warmup", "4")
    assert proc.returncode == 0, proc.stderr
    rows = {(c, name, s): v for c, name, _, _, s, v in stored(db)}
    for c in (1, 2):  # calibration and warm-up requests came before level 1's first scrape
        assert rows[(c, "vllm:request_success_total", "delta")] == c * 3
        assert rows[(c, "vllm:time_to_first_token_seconds", "count")] == c * 3
        assert 0.0025 <= rows[(c, "vllm:time_to_first_token_seconds", "p50")] <= 0.025
        assert rows[(c, "vllm:num_requests_running", "max")] <= c
    assert "Prometheus" not in proc.stderr


def test_no_server_metrics_flag_scrapes_nothing_and_stores_nothing(metrics_mock, tmp_path):
    db = tmp_path / "b.duckdb"
    proc = run_cli("run", "--url", metrics_mock.url, "--db", str(db), *RUN,
                   "--no-server-metrics", "--json")
    assert proc.returncode == 0, proc.stderr
    assert stored(db) == [] and metrics_mock.server.scrapes == 0
    with duckdb.connect(str(db), read_only=True) as con:
        config = json.loads(con.execute("SELECT config FROM runs").fetchone()[0])
    assert config["server_metrics"] is False


def test_a_target_without_metrics_records_nothing_and_says_so_once(mock_server, tmp_path):
    db = tmp_path / "b.duckdb"
    proc = run_cli("run", "--url", mock_server.url, "--db", str(db), *RUN)
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "no server metrics" in line]
    assert said == [f"no server metrics: {mock_server.url.removesuffix('/v1')}/metrics "
                    "answered HTTP 404"]
    assert stored(db) == []


def test_a_run_against_a_server_with_metrics_stores_them_per_level(tmp_path, start_mock):
    """The fake server's vLLM-named /metrics, scraped during a real run: the TTFT histogram's
    count grows by exactly the level's requests (warm-up and calibration left out)."""
    server = start_mock(MockConfig(ttft_ms=20, itl_ms=1, metrics=True))
    db = tmp_path / "m.duckdb"
    proc = run_cli("run", "--url", server.url, "--levels", "1,2", "--rounds", "2",
                   "--output-tokens", "8", "--warmup", "2", "--no-progress", "--db",
                   str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    run_id = json.loads(proc.stdout)["run_id"]
    rows = Store(db).server_metrics(run_id)
    counts = {r["concurrency"]: r["value"] for r in rows
              if r["name"] == "vllm:time_to_first_token_seconds" and r["stat"] == "count"}
    assert counts == {1: 2, 2: 4}
    running = [r for r in rows if r["name"] == "vllm:num_requests_running" and r["stat"] == "max"]
    assert {r["concurrency"] for r in running} == {1, 2}
    assert all(0 <= r["value"] <= r["concurrency"] for r in running)
