"""One run: its verdict line, TTFT and TPS against C with the targets, the per-level table,
distributions, first round against the rest, the server's Engram counters with the step-time
breakdown, the serving host's kernel counters (with host metrics) beside TTFT and TPOT and
over a level's own time, and the server's own metrics (/metrics) beside the client's TTFT. A
rate run (`run --mode rate`) shows its sustainable request rate, TTFT and TPS against the rate
and the send lag per rate level instead. A users run (`run --mode users`) is judged by its measured
Max users, beside the estimate from a closed run's Max C, with the duty cycle per level; a
multi-turn run (`--turns N`) adds TTFT and cached tokens per turn against the context."""

from pathlib import Path

import pandas as pd
import streamlit as st

from explorer import charts, data, literal, rate, tables, trace, ui
from explorer.counters import breakdown_frame, counters_frame
from harness.config import PROFILE_DUTY
from harness.results import verdicts
from harness.results.goodput import Slo
from harness.results.metrics import capacity, level_key

# counters_frame column: (readable name, number format; None for text)
COUNTERS = {
    "concurrency": ("C", "%d"),
    "repeat": ("repeat", "%d"),
    "tokens": ("tokens", "localized"),
    "disk_bytes_per_token": ("disk B/token", "%.0f"),
    "requested_bytes_per_token": ("requested B/token", "%.0f"),
    "page_hit_rate": ("page hit rate", "percent"),
    "major_faults_per_token": ("major faults/token", "%.3f"),
    "minor_faults_per_token": ("minor faults/token", "%.3f"),
    "engram_stall": ("Engram stall (of step time)", "percent"),
    "gather_cpu_ms_per_token": ("gather CPU ms/token", "%.3f"),
    "read_iops": ("disk read IOPS", "%.0f"),
    "read_queue_depth": ("mean read queue depth", "%.2f"),
    "resident_bytes": ("table resident", "bytes"),
    "resident_peak_bytes": ("resident peak", "bytes"),
    "budget_bytes": ("resident budget", "bytes"),
    "resident_of_budget": ("resident / budget", "percent"),
    "peak_of_budget": ("peak / budget", "percent"),
    "mapping_rss_bytes": ("mapping RSS", "bytes"),
    "counted_resident_bytes": ("resident (server's own count)", "bytes"),
    "placement": ("placement", None),
    "io_mode": ("I/O mode", None),
    "cache_state": ("cache state", None),
    "decode": ("decode", None),
}

# the client's figures shown beside the server's
CLIENT_TTFT = {"concurrency": ("C", "%d"), "mean_ttft_ms": ("client TTFT mean (ms)", "%.1f"),
               "p50_ttft_ms": ("client TTFT p50 (ms)", "%.1f")}

# request_distribution metric: its name on the page
DISTRIBUTIONS = {"ttft_ms": "TTFT (ms)", "tps": "TPS per request (tok/s)"}


@st.cache_data(show_spinner=False, max_entries=16)
def bands(path: str, version: tuple | None, run_id: str) -> pd.DataFrame:
    """The run's bands around mean TTFT and TPS where it has repeats (empty where not), per
    file version: cluster sums in SQL, the bootstrap once."""
    return data.level_bands(data.cluster_sums(Path(path), [run_id]))


def rate_distribution(path: Path, run_id: str, metric: str) -> pd.DataFrame:
    """Per rate level box statistics of ttft_ms or tps, computed in SQL."""
    column = {"ttft_ms": "ttft_ms", "tps": "tps"}[metric]
    return data.query(path, f"""
        SELECT rate, count(*) AS n, min(v) AS lo, quantile_cont(v, 0.25) AS q1,
               median(v) AS med, quantile_cont(v, 0.75) AS q3, max(v) AS hi, avg(v) AS mean
        FROM (SELECT rate, {column} AS v FROM request_figures
              WHERE run_id = ? AND rate IS NOT NULL AND ok AND latency_ms > 0)
        WHERE v IS NOT NULL GROUP BY rate ORDER BY rate""", [run_id])


def show_rate_run(run_id: str, levels: pd.DataFrame, labels: dict[str, str]) -> None:
    """An open-loop rate run: the sustainable request rate, TTFT and TPS against the rate,
    the per-rate table with the send lag, and where the load generator set the pace."""
    targets = ui.targets()
    rated = rate.rate_levels(levels)
    cap = rate.capacity(rated, targets)
    table = rate.judged(rated, cap)
    st.subheader(verdicts.rate_verdict(cap))
    cols = st.columns(3)
    cols[0].metric("sustainable rate (req/s)", f"{cap.max_rate:g}")
    cols[1].metric("rate levels", len(rated))
    lag = table["p99_send_lag_ms"].max() if "p99_send_lag_ms" in table else None
    cols[2].metric("worst p99 send lag (ms)", "-" if lag is None or pd.isna(lag) else f"{lag:.2f}")
    st.caption(f"The highest tested request rate whose {targets.statistic} TPS >= "
               f"{targets.tps_min:g} tok/s and TTFT <= {targets.ttft_max_ms:g} ms, with no "
               f"errors. Note: {verdicts.USERS_NEED_C}.")
    for warning in cap.warnings:
        st.warning(warning)
    passing = {(run_id, float(r)) for r, v in cap.levels if v.passes}
    lagged = {(run_id, float(r)) for r, flag in zip(table["rate"], table["lag_limited"],
                                                    strict=True) if flag}
    left, right = st.columns(2)
    left.plotly_chart(charts.metric_vs_rate(
        rated, "mean_ttft_ms", targets.ttft_max_ms, f"TTFT target {targets.ttft_max_ms:g} ms",
        passing, "mean TTFT (ms)", labels, lagged), width="stretch")
    right.plotly_chart(charts.metric_vs_rate(
        rated, "mean_tps", targets.tps_min, f"TPS target {targets.tps_min:g}", passing,
        "mean TPS per request (tok/s)", labels, lagged), width="stretch")
    st.subheader("Per rate level")
    st.caption("Send lag: how late requests went out against the open-loop schedule. Above "
               "10 ms at p99 the load generator, not the server, was the limit.")
    table = table.drop(columns=["source", "concurrency"], errors="ignore")
    tables.show(table, tables.RATE_LEVEL_COLUMNS, pinned=("rate",))
    ui.download("Levels CSV", lambda: table, f"{run_id}_levels.csv", len(table), "run_levels")
    path, _ = ui.database()
    st.subheader("Per-request distribution")
    metric = st.radio("metric", list(DISTRIBUTIONS), horizontal=True, key="run_dist",
                      format_func=DISTRIBUTIONS.get)
    dist = rate_distribution(path, run_id, metric)
    st.plotly_chart(charts.distribution(dist, DISTRIBUTIONS[metric], by_rate=True),
                    width="stretch")
    st.caption("The first-round, server counter and server metric sections are drawn per "
               "concurrency level, so a rate run leaves them out; its requests are in the CSV.")
    ui.download("Requests CSV", lambda: data.requests_frame(path, [run_id]),
                f"{run_id}_requests.csv", int(levels["requests"].sum()), "run_requests")


def show_trace_run(run_id: str, levels: pd.DataFrame, labels: dict[str, str]) -> None:
    """A timed trace replay: the speedup it sustains, TTFT and TPS against the rate each
    speedup offers, the per-level table with the trace's prompts, and a level over the
    trace's own time axis beside its arrivals."""
    targets = ui.targets()
    timed = trace.trace_levels(levels)
    cap, speedup = trace.capacity(timed, targets)
    table = rate.judged(timed, cap)
    st.subheader(f"Sustains {speedup:g}x the trace's rate" if speedup
                 else "No speedup of the trace meets the targets")
    cols = st.columns(3)
    cols[0].metric("sustained speedup", f"{speedup:g}x")
    cols[1].metric("its request rate (req/s)", f"{cap.max_rate:.3g}")
    cols[2].metric("speedups replayed", len(timed))
    st.caption(f"The fastest replay of the trace (its clock divided by the speedup) whose "
               f"{targets.statistic} TPS >= {targets.tps_min:g} tok/s and TTFT <= "
               f"{targets.ttft_max_ms:g} ms, with no errors. Note: "
               f"{verdicts.TRACE_USERS_NEED_C}.")
    for warning in cap.warnings:
        st.warning(warning)
    passing = {(run_id, float(r)) for r, v in cap.levels if v.passes}
    left, right = st.columns(2)
    left.plotly_chart(charts.metric_vs_rate(
        timed, "mean_ttft_ms", targets.ttft_max_ms, f"TTFT target {targets.ttft_max_ms:g} ms",
        passing, "mean TTFT (ms)", labels), width="stretch")
    right.plotly_chart(charts.metric_vs_rate(
        timed, "mean_tps", targets.tps_min, f"TPS target {targets.tps_min:g}", passing,
        "mean TPS per request (tok/s)", labels), width="stretch")
    st.subheader("Per speedup")
    st.caption("Each speedup replays the trace's window once, at the request rate shown. "
               "Prompt tokens asked: the trace's lengths, scaled and clipped; shared: those "
               "in blocks an earlier request of the level sent first (its hash ids); cached: "
               "those the server said it reused.")
    table = table.drop(columns=["source", "concurrency"], errors="ignore")
    tables.show(table, tables.TRACE_LEVEL_COLUMNS, pinned=("speedup",))
    ui.download("Levels CSV", lambda: table, f"{run_id}_levels.csv", len(table), "run_levels")
    path, _ = ui.database()
    st.subheader("Over the trace's time")
    choices = [float(x) for x in timed["speedup"]]
    chosen = st.selectbox("speedup", choices, index=choices.index(speedup)
                          if speedup in choices else 0, format_func=lambda x: f"{x:g}x",
                          key="trace_speedup")
    windows = trace.windows(path, run_id, chosen)
    if not windows.empty:
        st.plotly_chart(charts.trace_timeline(windows, chosen), width="stretch")
        st.caption(f"Windows of {windows['width_s'].iloc[0]:g} s of trace time: the requests "
                   "due in each (grey, per second of the replay) and how they were served.")
    ui.download("Requests CSV", lambda: data.requests_frame(path, [run_id]),
                f"{run_id}_requests.csv", int(levels["requests"].sum()), "run_requests")


def show_users_headline(run_id: str, n_levels: int) -> None:
    """A users run's headline: Max users measured at its duty cycle beside the estimate from
    the paired closed run's Max C, and the users per Max C this hardware really gives."""
    row = ui.users_for([run_id]).iloc[0]
    st.subheader(literal.markdown(row["verdict"]))
    duty = row["duty_cycle"]
    cols = st.columns(5)
    cols[0].metric("Max users (measured)", int(row["max_users"]),
                   help="The highest user count whose requests met every target.")
    cols[1].metric("duty cycle (measured)", "-" if pd.isna(duty) else f"{duty:.2f}",
                   help="At Max users: the share of the users' time with a request running.")
    if row["estimate"] is None:  # no paired closed run, or no factor for its think time
        cols[2].metric("levels", n_levels)
        if row["paired_run"] is None:
            st.info(f"No estimate: {data.NO_PAIRED_RUN}. {data.GET_PAIRED_RUN}")
        return
    paired = literal.markdown(literal.shorten(str(row["paired_run"])))
    cols[2].metric(f"estimate: Max C {row['factor']}", int(row["estimated_users"]),
                   help=f"{row['estimate']}, from run {paired}.")
    factor = row["measured_factor"]
    cols[3].metric("users per Max C (measured)", "-" if pd.isna(factor) else f"{factor:.2f}")
    cols[4].metric("levels", n_levels)
    st.caption(f"Max users (measured) {int(row['max_users'])}"
               f"{'' if pd.isna(duty) else f' at duty cycle {duty:.2f}'}, beside the estimate "
               f"{row['estimate']} from the closed run {paired} of the same setup.")


TOKEN_FIGURES = {"mean_tpot_ms": "TPOT mean", "p99_tpot_ms": "TPOT p99",
                 "p50_itl_ms": "ITL p50", "p99_itl_ms": "ITL p99"}
E2E_FIGURES = {"p50_e2e_ms": "E2E p50", "p90_e2e_ms": "E2E p90", "p99_e2e_ms": "E2E p99"}


def show_token_timing(path: Path, run_id: str, levels: pd.DataFrame, labels: dict[str, str],
                      users: set[str]) -> None:
    """TPOT, token-weighted ITL and end-to-end latency per level, goodput under an SLO set
    here, and with `--token-times` a request timeline of a chosen level."""
    if "mean_tpot_ms" not in levels or levels["mean_tpot_ms"].isna().all():
        return
    st.subheader("Token timing per level")
    st.caption("TPOT: (latency - TTFT) / (output tokens - 1) per request, the tokens the "
               "server counted. ITL is token-weighted: a chunk of k tokens that came g ms after "
               "the one before counts as k gaps of g / k, so a speculative server's multi-token "
               "chunks are not read as one slow token (each request's chunk gaps are in the "
               "requests CSV, named chunk_gap_*). Tokens per chunk come from the server's "
               "per-chunk usage, else are estimated. A red cross marks a client-bound level.")
    left, right = st.columns(2)
    left.plotly_chart(charts.figures_vs_c(levels, TOKEN_FIGURES, "ms per output token", labels,
                                          users), width="stretch")
    right.plotly_chart(charts.figures_vs_c(levels, E2E_FIGURES, "end-to-end latency (ms)",
                                           labels, users), width="stretch")
    st.markdown("**Goodput**: the share of requests meeting every objective you set (0: none)")
    cols = st.columns(3)
    limits = {key: cols[i].number_input(name, min_value=0.0, value=0.0, step=10.0,
                                        key=f"slo_{key}")
              for i, (key, name) in enumerate((("ttft_ms", "TTFT at most (ms)"),
                                               ("tpot_ms", "TPOT at most (ms)"),
                                               ("e2e_ms", "E2E at most (ms)")))}
    given = {k: v for k, v in limits.items() if v > 0}
    if given:
        good = data.goodput(path, run_id, Slo(**given))
        tables.show(good, tables.GOODPUT_COLUMNS, pinned=("concurrency",))
        good["run_id"] = run_id
        st.plotly_chart(charts.figures_vs_c(
            good.merge(levels[["run_id", "concurrency", *(
                ["client_bound", "loop_lag_p99_ms"] if "client_bound" in levels else [])]],
                on=["run_id", "concurrency"], how="left"),
            {"goodput_share": "goodput share"}, "share of requests meeting the SLO", labels,
            users), width="stretch")
    if data.has_token_times(path, run_id):
        st.subheader("Request timeline")
        st.caption("Stored with --token-times: each bar is one request, grey while it waited "
                   "for its first token, blue while it streamed; each tick is a chunk's "
                   "arrival (its tokens in the hover). The level's first 64 requests.")
        level = st.selectbox("level", [int(c) for c in levels["concurrency"]],
                             key="timeline_level")
        requests, chunks = data.timeline(path, run_id, level)
        bound = levels.loc[levels["concurrency"] == level, "client_bound"].eq(True).any() \
            if "client_bound" in levels else False
        st.plotly_chart(charts.request_timeline(requests, chunks, bool(bound)),
                        width="stretch")


def show_host(path: Path, run_id: str, levels: pd.DataFrame) -> None:
    """The serving hosts' kernel counters per level (`run --host-metrics`, or the agent a
    started server gets) beside TTFT and TPOT, and a level's one-second slices on its own
    time axis."""
    host = data.host_levels(path, run_id, levels)
    if host.empty:
        return
    st.subheader("The serving host per level")
    st.caption("From each host's engram-bench agent (or node_exporter), scraped as the level "
               "began, every second and as it ended. Disk bytes: what the server's process "
               "tree caused to be read from storage (/proc/PID/io read_bytes: faults on the "
               "table's mapping, readahead, O_DIRECT reads; not page-cache hits) over the "
               "level, per output and per prompt token; residency: the table files' bytes in "
               "the page cache at the level's start and end; I/O stall: PSI's share of the "
               "level some task waited on I/O; disk busy: the disk's share of the level with "
               "I/O in flight. Blank where a host has no such figure (a node_exporter has no "
               "process tree); 'why missing' says where figures were lost.")
    tables.show(host, tables.HOST_COLUMNS, pinned=("concurrency",))
    ui.download("Host CSV", lambda: host, f"{run_id}_host.csv", len(host), "run_host")
    level = st.selectbox("level", [int(c) for c in host["concurrency"]], key="host_level")
    slices, requests = data.host_slices(path, run_id, level)
    if slices.empty:
        st.caption("No time slices for this level (no two scrapes of a host answered).")
        return
    st.plotly_chart(charts.host_timeline(slices, requests, level), width="stretch")
    st.caption("Each slice spans two successive scrapes (about a second), placed on the "
               "harness's clock: an agent on another host has its clock mapped over the "
               "scrapes' round trips, as `run --ray` maps its load hosts'.")


def show_turns(run_id: str, users: bool) -> None:
    """A multi-turn run: per level and turn, the context sent (prompt tokens), what the server
    had cached of it, TTFT and TPS, as a table and TTFT against the context length."""
    turns = ui.turns_of(run_id)
    if turns.empty or turns["turn"].max() < 2:
        return
    st.subheader("Per turn: context length and cached tokens")
    st.caption("Each turn sends the conversation so far, so its prompt tokens are the context "
               "length. Cached tokens: the prompt tokens the server reported it reused "
               "(usage.prompt_tokens_details.cached_tokens); blank where it reported none.")
    table = turns.drop(columns=["run_id"])
    if users:
        table = table.rename(columns={"concurrency": "users"})
    tables.show(table, tables.TURN_COLUMNS, pinned=("users" if users else "concurrency", "turn"))
    ui.download("Turns CSV", lambda: table, f"{run_id}_turns.csv", len(table), "run_turns")
    st.plotly_chart(charts.ttft_vs_context(turns, users), width="stretch")


st.title("Run")
labels = ui.run_labels()
if not labels:
    ui.empty_state()
else:
    run_id = st.selectbox("run", list(labels), format_func=labels.__getitem__, key="run_id")
    ui.report_download([run_id], "run_report")
    levels = ui.levels_for([run_id])
    if levels.empty:
        st.info("This run has stored no finished round yet: its levels appear as they finish.")
    elif not trace.trace_levels(levels).empty:  # a timed trace replay: levels are speedups
        show_trace_run(run_id, levels, labels)
    elif not rate.rate_levels(levels).empty:  # run --mode rate: levels are request rates
        show_rate_run(run_id, levels, labels)
    else:
        targets = ui.targets()
        run = ui.run_row(run_id)
        users = level_key(run.get("mode")) == "U"  # a level is a user count U
        user_runs = {run_id} if users else set()
        judged = data.steady_levels(levels) if users else levels  # users: steady levels only
        points = data.points(judged, targets.statistic, targets.ttft_of).get(run_id, [])
        cap = capacity(points, targets, users_levels=users)
        passing = {(run_id, v.concurrency) for v in cap.levels if v.passes}
        if users:
            show_users_headline(run_id, len(levels))
        else:
            st.subheader(data.verdict(cap, data.probe_levels(levels).get(run_id, set())))
            cols = st.columns(4)
            cols[0].metric("Max C", cap.max_c)
            cols[1].metric("chat users", cap.chat_users)
            cols[2].metric("agentic users", cap.agentic_users)
            cols[3].metric("levels", len(levels))
        for warning in cap.warnings:
            st.warning(warning)
        db, version = ui.database()
        band = bands(str(db), version, run_id)
        left, right = st.columns(2)
        left.plotly_chart(charts.metric_vs_c(
            levels, "mean_ttft_ms", targets.ttft_max_ms, f"TTFT target {targets.ttft_max_ms:g} ms",
            passing, "mean TTFT (ms)", labels, band[band["metric"] == "ttft"], user_runs),
            width="stretch")
        right.plotly_chart(charts.metric_vs_c(
            levels, "mean_tps", targets.tps_min, f"TPS target {targets.tps_min:g}", passing,
            "mean TPS per request (tok/s)", labels, band[band["metric"] == "tps"], user_runs),
            width="stretch")
        if not band.empty:
            st.caption("Shaded: where the run has repeats (`run --repeat N`), the 95% bootstrap "
                       "interval of the level mean over (repeat, round) clusters, or the range "
                       "over repeats where there are fewer than 20 clusters (the legend says "
                       "which).")
        by_level = {v.concurrency: v for v in cap.levels}
        table = levels.drop(columns=["source"], errors="ignore").copy()
        table["passes"] = [by_level[int(c)].passes if int(c) in by_level else None
                           for c in table["concurrency"]]
        table["fails_because"] = [by_level[int(c)].reason if int(c) in by_level
                                  else "not in steady state" for c in table["concurrency"]]
        st.subheader("Per level")
        if users:
            table = table.rename(columns={"concurrency": "users"})
            st.caption("A level is U simulated users, each sending a request, thinking around "
                       "the level's one mean think Z, then sending the next. Duty cycle: the "
                       "share of their time with a request running. Steady state: the duty "
                       "cycle and the response-time law U = X (R + Z) within their own noise; "
                       "a level that is not is left out of Max users (raise --rounds). Within "
                       "noise: the level's interval holds a target, so its verdict could turn.")
            tables.show(table, tables.USERS_LEVEL_COLUMNS, pinned=("users",))
        else:
            tables.show(table, tables.LEVEL_COLUMNS, pinned=("concurrency",))
        ui.download("Levels CSV", lambda: table, f"{run_id}_levels.csv", len(table), "run_levels")
        if users and levels["duty_cycle"].notna().any():
            target = run.get("duty_target")
            if pd.isna(target):
                profile = run.get("profile")
                target = PROFILE_DUTY.get(profile) if isinstance(profile, str) else None
            st.plotly_chart(charts.duty_cycle_vs_users(levels, target, labels), width="stretch")
        if run:
            show_turns(run_id, users)
        if run_id in set(ui.published()[0]["run_id"]):
            st.info("A published run: only its per-level means are known.")
        else:
            path, _ = ui.database()
            show_token_timing(path, run_id, levels, labels, user_runs)
            st.subheader("Per-request distribution")
            metric = st.radio("metric", list(DISTRIBUTIONS), horizontal=True, key="run_dist",
                              format_func=DISTRIBUTIONS.get)
            dist = data.request_distribution(path, run_id, metric)
            st.plotly_chart(charts.distribution(dist, DISTRIBUTIONS[metric], users=users),
                            width="stretch")
            st.subheader("First round against the rest")
            if users:
                st.caption("A users run's round is the user's request: the first round is each "
                           "user's first request.")
            st.plotly_chart(charts.first_vs_rest(data.first_round_vs_rest(path, run_id),
                                                 "mean_tps", "mean TPS per request (tok/s)",
                                                 users), width="stretch")
            stats = data.server_stats(path, run_id)
            counters = counters_frame(stats)
            st.subheader("Server Engram counters per level")
            if counters.empty:
                st.caption("The server recorded no Engram counters (not the bundled server).")
            else:
                st.caption("Deltas of the server's /stats over each level, sizes as it ended. Disk "
                           "bytes and faults are the kernel's counts, requested bytes the server's "
                           "own arithmetic; blank where the server did not measure. With "
                           "--repeat, a row per pass of a level.")
                shown = counters.dropna(axis=1, how="all")  # older servers lack most counters
                if shown["repeat"].max() == 0:  # one pass per level: nothing to tell apart
                    shown = shown.drop(columns="repeat")
                st.dataframe(
                    shown.rename(columns={k: label for k, (label, _) in COUNTERS.items()}),
                    hide_index=True, width="stretch",
                    column_config={label: st.column_config.NumberColumn(format=fmt)
                                   for key, (label, fmt) in COUNTERS.items()
                                   if fmt and key in shown})
                parts = breakdown_frame(stats)
                if not parts.empty:
                    st.plotly_chart(charts.step_breakdown(parts), width="stretch")
            show_host(path, run_id, levels)
            st.subheader("Server metrics per level")
            figures = data.server_figures(path, [run_id])
            if figures.empty:
                st.caption("No server metrics for this run: its target exposed no Prometheus "
                           "/metrics, or it ran with --no-server-metrics or before they were "
                           "recorded.")
            else:
                st.caption("From the target's Prometheus /metrics, scraped as each level began "
                           "and ended and every 0.5 s between: the server's own TTFT and queue "
                           "time from the level's histogram buckets, gauges as mean and max, "
                           "counters as the level's growth; blank where the server exposes "
                           "nothing of the kind. Means are exact; percentiles are only as fine "
                           "as the server's buckets (vLLM's queue time starts at 0.3 s, so a "
                           "level that never queued shows a p50 of 150 ms). With --repeat, "
                           "each figure is the mean over the level's passes.")
                joined = data.server_vs_client(levels, figures)
                shown = joined[["concurrency", "mean_ttft_ms", "p50_ttft_ms",
                                *data.server_columns(joined)]].dropna(axis=1, how="all")
                names = {**CLIENT_TTFT, **data.SERVER_FIGURES}
                st.dataframe(
                    shown.rename(columns={k: label for k, (label, _) in names.items()}),
                    hide_index=True, width="stretch",
                    column_config={label: st.column_config.NumberColumn(format=fmt)
                                   for key, (label, fmt) in names.items() if key in shown})
                st.plotly_chart(charts.ttft_sources(joined), width="stretch")
            n_requests = int(levels["requests"].sum())
            ui.download("Requests CSV", lambda: data.requests_frame(path, [run_id]),
                        f"{run_id}_requests.csv", n_requests, "run_requests")
