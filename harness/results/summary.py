"""The shape of a run's summary: what `summarise` builds, `print_summary` prints and
`run --json` / `summary --json` write. Typed here, serialised to JSON only at the CLI's edge."""

from __future__ import annotations

from typing import TypedDict

from harness.results.declared_row import DeclaredRow
from harness.results.metrics import judged_fields, level_label


class TargetsDict(TypedDict):
    """`metrics.Targets` as the summary states them."""

    tps_min: float
    ttft_max_ms: float
    statistic: str
    chat_factor: float
    agentic_factor: float
    slo: dict[str, float | None] | None  # ttft_ms, tpot_ms, e2e_ms: None where not set
    min_goodput: float | None
    ttft_of: str  # which first token the TTFT target judged: "first", or "output" (TTFO)


class IntervalDict(TypedDict):
    """A 95% interval of a level's mean (harness.results.confidence), rounded."""

    mean: float | None
    low: float | None
    high: float | None
    method: str
    clusters: int
    repeats: int
    note: str | None


class HostDict(TypedDict):
    """The serving hosts over a level (`run --host-metrics`, or the agent a started server
    gets), from their kernels' counters (harness.results.host_figures): per-token figures
    divide the level's growths by the tokens its requests reported; None where a host or a
    pass lacks the figure (`missing` says why, where it was lost)."""

    source: str  # engram-bench agent, node_exporter, or both
    nodes: int
    missing: str | None
    tree_read_bytes: float | None  # the process trees' /proc/PID/io read_bytes growth
    tree_read_bytes_per_output_token: float | None
    tree_read_bytes_per_prompt_token: float | None
    major_faults_per_output_token: float | None
    table_bytes: float | None
    table_resident_bytes_start: float | None
    table_resident_bytes_end: float | None
    peak_rss_file_bytes: float | None
    peak_rss_shmem_bytes: float | None
    peak_pinned_bytes: float | None
    peak_locked_bytes: float | None
    io_stall_share: float | None  # PSI io "some" over the level's wall time, worst node
    disk_busy_share: float | None  # the busiest disk's I/O time over wall time, worst node
    disks: str | None
    device_read_bytes_per_output_token: float | None  # the disks' reads, every process's
    host_major_faults_per_output_token: float | None  # the hosts' pgmajfault, every process's
    # `run --table-state`, on the level of the run's first pass (harness.results.cold_start):
    # cold, warm, or "not cold" where cold was asked and the residency at its start is not
    table_state: str | None
    table_state_ttft_ms: float | None  # mean TTFT of its first C requests: met the state
    table_state_requests: int | None  # ... how many of them had a first token


class LevelRow(DeclaredRow, total=False):
    """One level: every figure of `metrics.LevelStats` the summary shows (its keys and their
    order come from LevelStats' declarations; a test fails when one is not typed here; the
    declared per-request figures' keys are typed in DeclaredRow, written from their
    declaration), and its verdict. Rate levels add the rate and send lag; users levels the
    duty cycle; repeats intervals."""

    concurrency: int
    requests: int
    errors: int
    short_outputs: int
    throughput_tps: float | None
    mean_itl_ms: float | None  # token-weighted
    p50_itl_ms: float | None
    p90_itl_ms: float | None
    p99_itl_ms: float | None
    tokens_per_chunk_estimated: bool | None
    spec_acceptance_rate: float | None  # the server's speculative decoding, where exposed
    spec_mean_accepted_length: float | None
    loop_lag_p50_ms: float | None  # the harness's self-check (harness.results.client_check)
    loop_lag_p99_ms: float | None
    client_cpu_share: float | None
    client_cpu_wait_share: float | None  # the loop's thread runnable without a CPU
    read_lag_mean_ms: float | None  # how late the loop read first tokens (the kernel's clock)
    unread_bytes_max: int | None
    client_bound: bool | None
    # a server `run` started itself (harness.results.server_cpu): the cores it kept busy, the
    # shares of the machine's CPU time other processes took and no process used, and whether
    # that starved it
    server_cores: float | None
    others_cpu_share: float | None
    idle_cpu_share: float | None
    server_starved: bool | None
    host: HostDict | None  # the serving hosts' kernel counters, with --host-metrics
    goodput_share: float | None  # with --slo
    goodput_rps: float | None
    passes: bool
    fails_because: str | None
    missing_rounds: int  # closed and burst levels: (repeat, round) not stored whole
    rate: float | None
    p50_send_lag_ms: float | None
    p99_send_lag_ms: float | None
    speedup: float | None  # a trace replay's levels: the timed level's speedup
    prefix_hit_rate: float | None  # ... the server prefix cache's hits over queries, from /metrics
    duty_cycle: float | None  # users levels: measured share of the users' time with a request
    think_mean_ms: float | None  # users levels: the mean think Z (harness.run.think)
    lead_in_cycles: float | None  # users levels: unstored requests per user before storing
    response_time_law_error_pct: float | None  # U / (X (R + Z)) - 1 over the stored window
    steady_state: bool | None  # users levels: duty and the law within their noise
    steady_state_note: str | None  # why not
    within_noise: bool | None  # users levels: the interval holds a target
    in_flight_mean: float | None  # users levels: requests in flight at the server, over time
    in_flight_sd: float | None  # ... and their spread (a closed level's is ~0)
    ttft_ci: IntervalDict | None
    tps_ci: IntervalDict | None


class SearchDict(TypedDict):
    """How `--search` found Max C."""

    how: str
    exact: bool
    lower_bound: bool


class AgreementDict(TypedDict):
    """Max C of each repeat on its own, and how many agree."""

    max_c: int
    agree: int
    repeats: int
    text: str


class UsersDict(TypedDict):
    """A users run: measured max users beside the factor estimate of a paired closed run."""

    profile: str | None
    duty_cycle_target: float | None
    think_s: float | None
    think_dist: str
    max_users: int
    uncertain_levels: list[int]  # levels whose verdict lies within their noise
    unsteady_levels: list[int]  # levels not in steady state: left out of max_users
    duty_cycle: float | None
    factor: float | None
    closed_run: str | None
    max_c: int | None
    estimated_users: int | None
    predicted_users: float | None
    measured_factor: float | None


class TurnRow(TypedDict):
    """One turn of the conversations: the context sent, what was cached, TTFT."""

    turn: int
    requests: int
    mean_prompt_tokens: float | None
    mean_cached_tokens: float | None
    mean_ttft_ms: float | None


class TraceWindowDict(TypedDict):
    """A window of a timed trace level's trace time (harness.results.trace_windows)."""

    start_s: float
    width_s: float
    requests: int
    arrival_rate: float | None  # None: a last window of no width
    errors: int
    mean_ttft_ms: float | None
    mean_tpot_ms: float | None


class TraceLevelWindows(TypedDict):
    speedup: float
    windows: list[TraceWindowDict]


class JudgedDict(TypedDict):
    ttft: str
    tps: str


class LoadHostDict(TypedDict):
    """A `--ray` load worker's Ray node and host, and its wall clock minus the driver's."""

    worker: int
    node_id: str
    hostname: str
    clock_offset_ms: float
    round_trip_ms: float


class Summary(TypedDict, total=False):
    """A run's summary; keys a mode does not have are absent (users, max_rate) or None."""

    run_id: str
    status: str
    device: str | None  # the run's own columns, NULL in a row another tool wrote
    engine: str | None
    model: str | None
    table_placement: str | None
    label: str | None
    mode: str | None
    rounds: int | None
    input_tokens: int | None
    measured_input_tokens: float | None
    output_tokens: int | None
    targets: TargetsDict
    statistic: str
    judged: JudgedDict
    levels: list[LevelRow]
    max_c: int | None
    max_c_search: SearchDict | None
    max_c_starved: str | None  # the level that decided Max C failed while the server starved
    chat_users: int | None
    agentic_users: int | None
    repeats: int
    max_c_agreement: AgreementDict | None
    max_rate: float
    max_speedup: float  # a timed trace replay: the highest speedup meeting the targets
    max_speedup_search: str | None  # ... how --search found it
    trace_rate: float | None  # ... the window's mean request rate on the trace's clock
    trace_windows: list[TraceLevelWindows]  # ... each level over the trace's time axis
    users_note: str
    max_users: int
    users: UsersDict
    turns: list[TurnRow] | None
    token_times: bool  # `--token-times`: the run stored every chunk (chunk_times)
    workers: int  # `--workers`: the load processes each level was split across
    load_hosts: list[LoadHostDict]  # `--ray`: where each ran, and its host's clock offset
    warnings: list[str]


def judged(statistic: str, ttft_of: str = "first") -> JudgedDict:
    """The two figures the named statistic judges: TTFO in TTFT's place with `ttft_of`
    "output"."""
    ttft, tps = judged_fields(statistic, ttft_of)
    return {"ttft": ttft, "tps": tps}


def row_name(row: LevelRow) -> str:
    """'C=4', 'R=2' for a rate level, 'X=4' for a timed trace level: how the summary's lines
    name a level."""
    return level_label(row["concurrency"], row.get("rate"), row.get("speedup"), rate_unit="")
