-- The results file's views over tables.sql, replaced each time tables.sql runs.
-- each request with what its row implies: the derived per-request figures (TPS, TPOT: the
-- SQL forms of harness.records.RequestRecord's properties, declared in
-- harness.results.request_figures), and when it ended
CREATE OR REPLACE VIEW request_figures AS
SELECT r.*,
    -- derived per-request figures (harness.results.request_figures)
    r.sent_at + to_microseconds(CAST(round(r.latency_ms * 1000) AS BIGINT)) AS ended_at
FROM requests r;
-- a level is (concurrency, rate): rate levels have concurrency 0, the others rate NULL
-- throughput divides by the level's busy time, the union of its requests' spans (an outage
-- between resumed rounds is not in it): each request adds what it reaches past every one that
-- started before it (harness.results.quantiles.busy_seconds)
CREATE OR REPLACE VIEW levels AS
WITH spans AS (
    SELECT *, epoch_us(sent_at) AS start_us, epoch_us(coalesce(ended_at, sent_at)) AS end_us
    FROM request_figures
), q AS (
    SELECT *, greatest(0, end_us - greatest(start_us, coalesce(max(end_us) OVER (
        PARTITION BY run_id, concurrency, rate ORDER BY start_us, request_id
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), start_us))) AS busy_us
    FROM spans
), itl_bins AS (  -- a level's token gaps, pooled from its requests' histograms
    SELECT run_id, concurrency, rate, unnest(itl_bins) AS bin, unnest(itl_counts) AS n
    FROM requests WHERE ok AND itl_mean_ms IS NOT NULL
), itl_hist AS (
    SELECT run_id, concurrency, rate, bin, sum(n) AS n FROM itl_bins
    GROUP BY run_id, concurrency, rate, bin
), itl_cum AS (
    SELECT *, sum(n) OVER (PARTITION BY run_id, concurrency, rate ORDER BY bin) AS cum,
        sum(n) OVER (PARTITION BY run_id, concurrency, rate) AS total
    FROM itl_hist
), itl AS (  -- nearest rank over the merged bins (harness.results.token_timing.pooled_itl)
    SELECT run_id, concurrency, rate,
        pow(1.01, min(bin) FILTER (WHERE cum >= 0.5 * total)) / 1000.0 AS p50_itl_ms,
        pow(1.01, min(bin) FILTER (WHERE cum >= 0.9 * total)) / 1000.0 AS p90_itl_ms,
        pow(1.01, min(bin) FILTER (WHERE cum >= 0.99 * total)) / 1000.0 AS p99_itl_ms
    FROM itl_cum GROUP BY run_id, concurrency, rate
), client AS (  -- the worst pass of each level
    SELECT run_id, concurrency, rate, max(loop_lag_p99_ms) AS loop_lag_p99_ms,
        max(read_lag_mean_ms) AS read_lag_mean_ms,
        max(cpu_share) AS client_cpu_share, bool_or(client_bound) AS client_bound
    FROM client_checks GROUP BY run_id, concurrency, rate
), cpu AS (  -- a server the run started itself: the pass whose server was most starved
    SELECT run_id, concurrency, rate,
        arg_max(server_cpu_s / wall_s, others_cpu_s / (wall_s * cpus)) AS server_cores,
        max(others_cpu_s / (wall_s * cpus)) AS others_cpu_share,
        bool_or(server_starved) AS server_starved
    FROM server_cpu WHERE wall_s > 0 AND cpus > 0 GROUP BY run_id, concurrency, rate
)
SELECT
    q.run_id,
    q.concurrency,
    q.rate,
    count(*) AS requests,
    count(*) FILTER (WHERE NOT q.ok) AS errors,
    count(*) FILTER (WHERE q.ok AND q.output_tokens
                     < coalesce(q.output_tokens_requested, runs.output_tokens)) AS short_outputs,
    -- declared per-request figures (harness.results.request_figures)
    -- token-weighted: each request's mean ITL weighted by its token gaps
    sum(q.itl_mean_ms * list_sum(q.itl_counts)) FILTER (WHERE q.ok)
        / sum(list_sum(q.itl_counts)) FILTER (WHERE q.ok AND q.itl_mean_ms IS NOT NULL)
        AS mean_itl_ms,
    any_value(itl.p50_itl_ms) AS p50_itl_ms,
    any_value(itl.p90_itl_ms) AS p90_itl_ms,
    any_value(itl.p99_itl_ms) AS p99_itl_ms,
    bool_or(q.tokens_per_chunk_estimated) FILTER (WHERE q.ok) AS tokens_per_chunk_estimated,
    CASE WHEN count(*) FILTER (WHERE q.ok) > 0 AND sum(q.busy_us) > 0
         THEN sum(q.output_tokens) FILTER (WHERE q.ok) / sum(q.busy_us) * 1e6 END
        AS throughput_tps,
    sum(q.busy_us) / 1e6 AS busy_s,
    max(p.ordinal) IS NOT NULL AS probe,
    quantile_cont(epoch_us(q.sent_at) - epoch_us(q.scheduled_at), 0.5) / 1000.0
        AS p50_send_lag_ms,
    quantile_cont(epoch_us(q.sent_at) - epoch_us(q.scheduled_at), 0.99) / 1000.0
        AS p99_send_lag_ms,
    -- a trace replay: a timed level's speedup
    any_value(q.speedup) AS speedup,
    -- users mode: the share of each user's time with a request running (busy / busy + think)
    -- over the requests a think followed (harness.results.users.duty_cycle)
    CASE WHEN count(q.think_ms) FILTER (WHERE q.latency_ms IS NOT NULL) > 0
         THEN sum(q.latency_ms) FILTER (WHERE q.think_ms IS NOT NULL)
              / (sum(q.latency_ms) FILTER (WHERE q.think_ms IS NOT NULL)
                 + sum(q.think_ms) FILTER (WHERE q.latency_ms IS NOT NULL)) END
        AS duty_cycle,
    -- the harness's self-check and the server's CPU, the worst pass of the level
    any_value(client.loop_lag_p99_ms) AS loop_lag_p99_ms,
    any_value(client.read_lag_mean_ms) AS read_lag_mean_ms,
    any_value(client.client_cpu_share) AS client_cpu_share,
    any_value(client.client_bound) AS client_bound,
    any_value(cpu.server_cores) AS server_cores,
    any_value(cpu.others_cpu_share) AS others_cpu_share,
    any_value(cpu.server_starved) AS server_starved
FROM q JOIN runs USING (run_id)
LEFT JOIN probes p ON p.run_id = q.run_id AND p.concurrency = q.concurrency AND q.rate IS NULL
LEFT JOIN itl ON itl.run_id = q.run_id AND itl.concurrency = q.concurrency
    AND itl.rate IS NOT DISTINCT FROM q.rate
LEFT JOIN client ON client.run_id = q.run_id AND client.concurrency = q.concurrency
    AND client.rate IS NOT DISTINCT FROM q.rate
LEFT JOIN cpu ON cpu.run_id = q.run_id AND cpu.concurrency = q.concurrency
    AND cpu.rate IS NOT DISTINCT FROM q.rate
GROUP BY q.run_id, q.concurrency, q.rate;
-- multi-turn runs: per level and turn, the context each turn sent and what the server reused
CREATE OR REPLACE VIEW turns AS
SELECT
    run_id,
    concurrency,
    coalesce(turn, 1) AS turn,
    count(*) AS requests,
    count(*) FILTER (WHERE NOT ok) AS errors,
    avg(input_tokens) FILTER (WHERE ok) AS mean_prompt_tokens,
    avg(cached_tokens) FILTER (WHERE ok) AS mean_cached_tokens,
    avg(ttft_ms) FILTER (WHERE ok) AS mean_ttft_ms,
    avg(tps) AS mean_tps
FROM request_figures
WHERE rate IS NULL
GROUP BY run_id, concurrency, coalesce(turn, 1);
