-- The results file's tables (docs/reference/schema.md says what they hold). Run, then
-- views.sql, each time a run opens the file and when an older one is upgraded
-- (harness/results/schema.py), so each statement is safe to run again; a change to either is
-- one more SCHEMA_VERSION there.
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER);  -- one row: SCHEMA_VERSION
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY,
    started_at TIMESTAMP,
    finished_at TIMESTAMP,
    status VARCHAR,
    device VARCHAR,
    engine VARCHAR,
    model VARCHAR,
    table_placement VARCHAR,
    target_url VARCHAR,
    api VARCHAR,
    mode VARCHAR,
    levels INTEGER[],
    rounds INTEGER,
    input_tokens INTEGER,
    output_tokens INTEGER,
    measured_input_tokens DOUBLE,  -- mean usage.prompt_tokens of the prompts sent
    label VARCHAR,
    config VARCHAR,
    host VARCHAR,
    version VARCHAR,
    error VARCHAR
);
CREATE TABLE IF NOT EXISTS requests (
    run_id VARCHAR,
    concurrency INTEGER,
    round INTEGER,
    worker INTEGER,
    request_id VARCHAR,
    sent_at TIMESTAMP,
    ttft_ms DOUBLE,
    latency_ms DOUBLE,
    output_tokens INTEGER,
    output_tokens_estimated BOOLEAN,
    input_tokens INTEGER,
    chunks INTEGER,
    max_gap_ms DOUBLE,
    finish_reason VARCHAR,
    ok BOOLEAN,
    error_kind VARCHAR,
    error_message VARCHAR,
    http_status INTEGER,
    retried VARCHAR,  -- error kind of a first try that was silently re-sent, else NULL
    rate DOUBLE,  -- mode rate: the level's requests/s (concurrency 0); NULL in other modes
    scheduled_at TIMESTAMP,  -- mode rate: when the open-loop schedule said to send
    repeat INTEGER,  -- `run --repeat N`: the pass over the sweep, 0-based; NULL (older runs) = 0
    turn INTEGER,  -- `--turns N`: turn of the user's conversation, 1-based; NULL (older) = 1
    cached_tokens INTEGER,  -- usage.prompt_tokens_details.cached_tokens; NULL: not reported
    think_ms DOUBLE,  -- `--mode users`: think time after this request; NULL: none followed
    -- inter-token figures (harness.results.token_timing): chunk gaps, one value per content
    -- chunk, apart from the token-weighted ITL (a chunk of k tokens g after the one before is
    -- k gaps of g / k); tokens per chunk from per-chunk usage unless flagged estimated
    tokens_per_chunk DOUBLE,
    tokens_per_chunk_estimated BOOLEAN,
    chunk_gap_mean_ms DOUBLE,
    chunk_gap_p50_ms DOUBLE,
    chunk_gap_p90_ms DOUBLE,
    chunk_gap_p99_ms DOUBLE,
    itl_mean_ms DOUBLE,
    itl_p50_ms DOUBLE,
    itl_p90_ms DOUBLE,
    itl_p99_ms DOUBLE,
    itl_bins SMALLINT[],  -- the token gaps' histogram: bin b holds gaps of ~1.01^b us
    itl_counts INTEGER[],  -- ... and how many token gaps each bin holds
    speedup DOUBLE,  -- mode trace: the level's speedup over the trace's clock (rate: the
    -- requests/s that offers); NULL in other modes
    trace_line INTEGER,  -- modes trace, trace-closed: the request's line in the trace file
    trace_input_tokens INTEGER,  -- ... the input and output lengths the trace gives it
    trace_output_tokens INTEGER,
    input_tokens_requested INTEGER,  -- ... what its prompt was sized to (scaled, clipped)
    output_tokens_requested INTEGER,  -- ... its max_tokens
    trace_prefix_tokens INTEGER  -- ... its prompt's tokens in blocks an earlier request of
    -- the pass sent first: what the trace's hash ids leave a prefix cache to reuse
);
-- one row per request: a batch the writer sends again after a crash adds nothing
CREATE UNIQUE INDEX IF NOT EXISTS requests_unique_id ON requests (run_id, request_id);
CREATE TABLE IF NOT EXISTS server_stats (
    run_id VARCHAR,
    concurrency INTEGER,
    before VARCHAR,
    after VARCHAR,
    recorded_at TIMESTAMP,
    rate DOUBLE,
    repeat INTEGER  -- `run --repeat N`: the pass over the level, 0-based; NULL (older runs) = 0
);
-- a target's Prometheus /metrics over each level (harness.results.server_metrics):
-- counters "delta";
-- gauges "mean", "max"; histograms "p50", "p90", "p99", "count", "mean" (seconds as exposed)
CREATE TABLE IF NOT EXISTS server_metrics (
    run_id VARCHAR,
    concurrency INTEGER,
    name VARCHAR,
    labels VARCHAR,  -- JSON object
    kind VARCHAR,
    stat VARCHAR,
    value DOUBLE,
    rate DOUBLE,
    repeat INTEGER  -- as in server_stats
);
-- `run --token-times`: every content chunk of a request, its arrival after the request was
-- sent and its tokens (NULL where the server streamed no per-chunk usage)
CREATE TABLE IF NOT EXISTS chunk_times (
    run_id VARCHAR,
    request_id VARCHAR,
    idx INTEGER,
    t_ns BIGINT,
    tokens INTEGER
);
-- each pass of a level: was the harness the limit? its timing loop's lag (how late a 20 ms
-- timer fired), its CPU seconds per second, the received bytes left unread in its sockets and
-- how late it read first tokens (harness.results.client_check); with `--workers`, each figure
-- the worst of its processes
CREATE TABLE IF NOT EXISTS client_checks (
    run_id VARCHAR,
    concurrency INTEGER,
    rate DOUBLE,
    repeat INTEGER,
    loop_lag_p50_ms DOUBLE,
    loop_lag_p99_ms DOUBLE,
    loop_lag_max_ms DOUBLE,
    cpu_share DOUBLE,
    unread_bytes_max BIGINT,
    client_bound BOOLEAN,
    cpu_wait_share DOUBLE,  -- the loop's thread runnable without a CPU, per wall second
    -- how long each request's first token had been in its socket when the loop read it, the
    -- mean over the pass (the kernel's TCP_INFO; `--workers`: the slowest process's mean)
    read_lag_mean_ms DOUBLE
);
-- each pass of a level against a server `run` started itself: was the machine the limit? the
-- CPU seconds of the server's process tree, of the run's own processes and of every other
-- process on the machine (/proc/stat's busy time less the two trees), over the pass's wall time
-- on `cpus` CPUs (harness.results.server_cpu)
CREATE TABLE IF NOT EXISTS server_cpu (
    run_id VARCHAR,
    concurrency INTEGER,
    rate DOUBLE,
    repeat INTEGER,
    wall_s DOUBLE,
    cpus INTEGER,
    server_cpu_s DOUBLE,
    own_cpu_s DOUBLE,
    others_cpu_s DOUBLE,
    server_starved BOOLEAN  -- others took more than the stated share of the machine's CPU time
);
-- `run --host-metrics` (or the agent a started server gets): each serving host over each pass
-- of a level, from its engram-bench agent or node_exporter scraped as the level began, every
-- second of it and as it ended (harness.results.host_level): counters' growths over the level,
-- gauges' peaks, the table files' residency at each end; NULL where the source has no such
-- figure, or `missing` says why the level's figures were lost (a scrape failed, the watched
-- process tree ended)
CREATE TABLE IF NOT EXISTS host_levels (
    run_id VARCHAR,
    concurrency INTEGER,
    rate DOUBLE,
    repeat INTEGER,
    node INTEGER,  -- the URL's place in --host-metrics, 0-based
    url VARCHAR,
    source VARCHAR,  -- engram-bench agent or node_exporter
    missing VARCHAR,
    scrapes INTEGER,  -- scrapes answered over the level
    wall_s DOUBLE,  -- between the level's first and last scrape, on the host's clock
    clock_offset_ms DOUBLE,  -- the agent's wall clock minus the harness's
    round_trip_ms DOUBLE,  -- ... read at this round trip (the offset's error is half of it)
    read_bytes DOUBLE,  -- the process tree's /proc/PID/io read_bytes
    major_faults DOUBLE,
    minor_faults DOUBLE,
    processes_ended DOUBLE,
    table_bytes DOUBLE,
    table_resident_start_bytes DOUBLE,
    table_resident_end_bytes DOUBLE,
    table_sampled_fraction DOUBLE,  -- the least share of table pages asked about: 1 = exact
    peak_rss_file_bytes DOUBLE,
    peak_rss_shmem_bytes DOUBLE,
    peak_locked_bytes DOUBLE,
    peak_pinned_bytes DOUBLE,
    io_some_s DOUBLE,  -- PSI: time some task stalled on I/O (full: all did)
    io_full_s DOUBLE,
    memory_some_s DOUBLE,
    host_major_faults DOUBLE,  -- /proc/vmstat pgmajfault, every process of the host
    disk VARCHAR,  -- the disk busiest over the level (the agent's: one under a table file)
    disk_read_bytes DOUBLE,  -- ... read from it, by every process
    disk_reads DOUBLE,
    disk_io_time_s DOUBLE  -- ... time it had I/O in flight
);
-- ... and the spans between successive scrapes of a level (about a second each): growths
-- over the span, gauges at its end; start_s after the level's first scrape was sent and
-- started_at on the harness's clock, the agent's clock mapped to it over the scrapes' round
-- trips
CREATE TABLE IF NOT EXISTS host_slices (
    run_id VARCHAR,
    concurrency INTEGER,
    rate DOUBLE,
    repeat INTEGER,
    node INTEGER,
    start_s DOUBLE,
    width_s DOUBLE,
    started_at TIMESTAMP,
    read_bytes DOUBLE,
    major_faults DOUBLE,
    table_resident_bytes DOUBLE,
    rss_file_bytes DOUBLE,
    io_some_s DOUBLE,
    disk_io_time_s DOUBLE,
    disk_read_bytes DOUBLE
);
-- users mode, per pass of a level: the mean think Z its stored thinks were drawn around
-- (harness.run.think), how thinks spread around it, the unstored requests before them, and
-- whether that lead-in settled: its last cycle paced within tolerance of the target duty
CREATE TABLE IF NOT EXISTS user_levels (
    run_id VARCHAR,
    concurrency INTEGER,
    repeat INTEGER,
    think_mean_ms DOUBLE,
    think_dist VARCHAR,
    lead_in_requests INTEGER,
    lead_in_settled BOOLEAN,  -- NULL: stored before lead-ins were checked
    lead_in_duty DOUBLE
);
-- levels that `run --search` added after the sweep, in the order they were probed
CREATE TABLE IF NOT EXISTS probes (
    run_id VARCHAR,
    concurrency INTEGER,
    ordinal INTEGER
);
-- `run --ray`: each load worker's Ray actor as it started (harness.run.ray_workers): its node
-- and host, and that host's wall clock minus the driver's at the shortest of 16 round trips
CREATE TABLE IF NOT EXISTS load_hosts (
    run_id VARCHAR,
    worker INTEGER,
    node_id VARCHAR,
    hostname VARCHAR,
    clock_offset_ms DOUBLE,
    round_trip_ms DOUBLE,
    started_at TIMESTAMP
);
