"""Every table the explorer shows, with human names, units and number formats: a reader sees
"mean TTFT (ms)" and 36.7, never `mean_ttft_ms` or 36.7374. Raw field names stay in the CSV
downloads, where scripts read them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import pandas as pd
import streamlit as st

from explorer import literal
from harness.results.metrics import LEVEL_FIGURES, figure_names

if TYPE_CHECKING:
    from streamlit.elements.lib.column_types import ColumnConfig


@dataclass(slots=True, frozen=True)
class Column:
    label: str
    kind: str = "text"  # text | number | check | datetime
    format: str | None = None  # a NumberColumn / DatetimeColumn format
    width: Literal["small", "medium", "large"] | None = None  # "large" for sentences


MS, TOKS, COUNT, MEAN_COUNT = "%.1f", "%.1f", "%d", "%.1f"
COLUMNS: dict[str, Column] = {
    # runs and capacity
    "max_c": Column("Max C", "number", COUNT),
    "chat_users": Column("chat users", "number", COUNT),
    "agentic_users": Column("agentic users", "number", COUNT),
    "run_id": Column("run"),
    "verdict": Column("verdict", width="large"),
    "started_at": Column("started (UTC)", "datetime", "YYYY-MM-DD HH:mm"),
    "device": Column("device"),
    "engine": Column("engine"),
    "model": Column("model"),
    "table_placement": Column("table on"),
    "label": Column("label"),
    "status": Column("status"),
    "source": Column("source"),
    "nodes": Column("nodes", "number", COUNT),
    "tp": Column("tensor parallel", "number", COUNT),
    "speculative": Column("speculative decoding"),
    "tps_c1": Column("TPS at C=1 (tok/s)", "number", TOKS),
    "ttft_c1_ms": Column("TTFT at C=1 (ms)", "number", MS),
    "passing": Column("passing levels (C; U of a users run)"),
    "warnings": Column("warnings", width="large"),
    "max_rate": Column("max rate (req/s)", "number", "%.2f"),
    "published_max_c": Column("published Max C", "number", COUNT),
    "published_chat_users": Column("published chat users", "number", COUNT),
    "published_agentic_users": Column("published agentic users", "number", COUNT),
    "mode": Column("mode"),
    "profile": Column("users profile"),
    "turns": Column("turns", "number", COUNT),
    "input_tokens": Column("prompt tokens (set)", "number", COUNT),
    "output_tokens": Column("output tokens (set)", "number", COUNT),
    # users runs (--mode users): a level is a user count U
    "max_users": Column("Max users (measured)", "number", COUNT),
    "estimated_users": Column("estimated users", "number", COUNT),
    "estimate": Column("estimate"),
    "factor": Column("users per Max C (estimate)"),
    "paired_run": Column("estimated from run"),
    "paired_max_c": Column("its Max C", "number", COUNT),
    "measured_factor": Column("users per Max C (measured)", "number", "%.2f"),
    "users": Column("users", "number", COUNT),
    "duty_cycle": Column("duty cycle (measured)", "number", "%.2f"),
    "think_mean_ms": Column("think Z (ms)", "number", "%.0f"),
    "lead_in_cycles": Column("lead-in per user", "number", "%.1f"),
    "response_time_law_error_pct": Column("response-time law error (%)", "number", "%+.1f"),
    "steady_state": Column("steady state", "check", None),
    "steady_state_note": Column("why not steady", "text", None, "large"),
    "within_noise": Column("within noise of the targets", "check", None),
    "in_flight_mean": Column("in flight (mean)", "number", "%.1f"),
    "in_flight_sd": Column("in flight (sd)", "number", "%.1f"),
    "uncertain": Column("levels within noise", "text", None),
    "unsteady": Column("not in steady state", "text", None),
    "mean_cached_tokens": Column("cached tokens", "number", MEAN_COUNT),
    # levels: beside each LevelStats figure (its own column follows from its declaration)
    "passes": Column("passes", "check"),
    "probe": Column("probe", "check"),
    "fails_because": Column("fails because"),
    "client_bound": Column("client-bound", "check"),
    "loop_lag_p99_ms": Column("harness loop lag p99 (ms)", "number", "%.2f"),
    "read_lag_mean_ms": Column("harness first-token read lag (ms)", "number", "%.2f"),
    "client_cpu_share": Column("harness CPU (of a core)", "number", "percent"),
    "server_starved": Column("server starved of CPU", "check"),
    "server_cores": Column("server CPU (cores)", "number", "%.2f"),
    "others_cpu_share": Column("other processes' CPU (of the machine)", "number", "percent"),
    "lag_limited": Column("send lag > 10 ms", "check"),
    # the serving hosts' kernel counters (run --host-metrics), per level
    "tree_read_bytes_per_output_token": Column("server reads B / output token", "number", "%.0f"),
    "tree_read_bytes_per_prompt_token": Column("server reads B / prompt token", "number", "%.0f"),
    "major_faults_per_output_token": Column("major faults / output token", "number", "%.4f"),
    "table_bytes": Column("table size", "number", "bytes"),
    "table_resident_bytes_start": Column("table resident at start", "number", "bytes"),
    "table_resident_bytes_end": Column("table resident at end", "number", "bytes"),
    "peak_rss_file_bytes": Column("peak RssFile", "number", "bytes"),
    "peak_rss_shmem_bytes": Column("peak RssShmem", "number", "bytes"),
    "peak_pinned_bytes": Column("peak pinned", "number", "bytes"),
    "peak_locked_bytes": Column("peak locked", "number", "bytes"),
    "io_stall_share": Column("I/O stall (PSI some)", "number", "percent"),
    "disk_busy_share": Column("disk busy", "number", "percent"),
    "disks": Column("disks"),
    "device_read_bytes_per_output_token": Column("disk device B / output token (all "
                                                 "processes)", "number", "%.0f"),
    "host_major_faults_per_output_token": Column("host major faults / output token", "number",
                                                 "%.4f"),
    "missing": Column("why missing", width="large"),
    "table_state": Column("table start state (--table-state)"),
    "table_state_ttft_ms": Column("TTFT of its first requests (ms)", "number", "%.1f"),
    "table_state_requests": Column("first requests", "number", COUNT),
    # multi-turn runs: per turn of the conversations
    "turn": Column("turn", "number", COUNT),
    "cached_share": Column("cached share", "number", "percent"),
    # compare
    "tps_diff_pct": Column("TPS vs baseline (%)", "number", "%+.1f%%"),
    "ttft_diff_pct": Column("TTFT vs baseline (%)", "number", "%+.1f%%"),
    "tps_diff_low": Column("TPS diff low (%)", "number", "%+.1f%%"),
    "tps_diff_high": Column("TPS diff high (%)", "number", "%+.1f%%"),
    "tps_verdict": Column("TPS verdict"),
    "ttft_diff_low": Column("TTFT diff low (%)", "number", "%+.1f%%"),
    "ttft_diff_high": Column("TTFT diff high (%)", "number", "%+.1f%%"),
    "ttft_verdict": Column("TTFT verdict"),
    **{name: Column(fig.title, "number" if fig.format else "check", fig.format)
       for name, fig in LEVEL_FIGURES.items() if fig.explorer},
}

# What a buyer came for leads every runs table and stays in view when it scrolls sideways;
# the run id follows unpinned, or long published names would fill a narrow window on their own.
RUN_PINNED = ("max_c", "chat_users", "agentic_users")
# a level's verdict and the figures judged lead; then every other LevelStats figure in its
# order (harness.results.figure), the harness's self-check, a started server's CPU and the
# cached prompt tokens
LEVEL_LEAD = ("concurrency", "rate", "passes", "probe", "mean_ttft_ms", "p99_ttft_ms",
              "mean_tps", "p10_tps", "fails_because")
LEVEL_COLUMNS = (*LEVEL_LEAD,
                 *(c for c in (*figure_names("level", "explorer"),
                               *figure_names("rate", "explorer")) if c not in LEVEL_LEAD),
                 "client_bound", "loop_lag_p99_ms", "read_lag_mean_ms", "client_cpu_share",
                 "server_starved", "server_cores", "others_cpu_share",
                 *figure_names("trace", "explorer"))
# goodput per level under the SLO set on the Run page
GOODPUT_COLUMNS = ("concurrency", "requests", *figure_names("slo", "explorer"))

# a rate run's levels (`run --mode rate`): keyed by the request rate, send lag up front
RATE_LEVEL_COLUMNS = ("rate", "passes", "mean_ttft_ms", "p99_ttft_ms", "mean_tps", "p10_tps",
                      "p50_send_lag_ms", "p99_send_lag_ms", "lag_limited", "fails_because",
                      "requests", "errors", "short_outputs", "p50_ttft_ms", "p90_ttft_ms",
                      "p50_tps", "p1_tps", "throughput_tps", "mean_output_tokens",
                      "mean_prompt_tokens")

# a timed trace replay's levels: keyed by the speedup (and the rate it offers), the trace's
# prompts beside what the server counted and found cached
TRACE_LEVEL_COLUMNS = ("speedup", "rate", "passes", "mean_ttft_ms", "p99_ttft_ms", "mean_tps",
                       "p10_tps", "p50_send_lag_ms", "p99_send_lag_ms", "lag_limited",
                       "fails_because", *(c for c in figure_names("trace", "explorer")
                                          if c != "speedup"),
                       "mean_prompt_tokens", "requests", "errors", "short_outputs",
                       "mean_tpot_ms", "p99_tpot_ms", "throughput_tps", "mean_output_tokens")

# a users run's levels (`run --mode users`): keyed by the user count, duty cycle up front
USERS_LEVEL_COLUMNS = ("users", "passes", "within_noise", "steady_state", "duty_cycle",
                       "lead_in_cycles", "think_mean_ms", "response_time_law_error_pct",
                       "in_flight_mean", "in_flight_sd", "steady_state_note", *(
    c for c in LEVEL_COLUMNS
    if c not in ("concurrency", "passes", "probe", *figure_names("rate", "explorer"))))

# the serving hosts per level, beside the client's TTFT and TPOT
HOST_COLUMNS = ("concurrency", "mean_ttft_ms", "mean_tpot_ms",
                "tree_read_bytes_per_output_token", "tree_read_bytes_per_prompt_token",
                "major_faults_per_output_token", "table_resident_bytes_start",
                "table_resident_bytes_end", "table_bytes", "peak_rss_file_bytes",
                "peak_rss_shmem_bytes", "peak_pinned_bytes", "peak_locked_bytes",
                "io_stall_share", "disk_busy_share", "disks",
                "device_read_bytes_per_output_token", "host_major_faults_per_output_token",
                "table_state", "table_state_ttft_ms", "table_state_requests",
                "source", "nodes", "missing")
# a multi-turn run's turns: the context each turn sent and what the server had cached of it
TURN_COLUMNS = ("concurrency", "users", "turn", "mean_prompt_tokens", "mean_cached_tokens",
                "cached_share", "mean_ttft_ms", "mean_tps", "requests", "errors")


def human(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """The chosen columns that the frame has, in that order, under their human names; columns
    with no value at all (a published run's percentiles, a closed run's rate) are left out.
    Text cells are cut to `literal.CELL_CHARS` on one line (a results file may hold any run id
    or label)."""
    present = [c for c in columns if c in frame and frame[c].notna().any()]
    shown = frame[present].copy()
    for c in present:
        if COLUMNS[c].kind == "text":
            shown[c] = [literal.shorten(v, literal.CELL_CHARS) if isinstance(v, str) else v
                        for v in shown[c]]
    return shown.rename(columns={c: COLUMNS[c].label for c in present})


def _config(column: Column, pinned: bool) -> ColumnConfig:
    if column.kind == "number":
        return st.column_config.NumberColumn(column.label, format=column.format, pinned=pinned)
    if column.kind == "check":
        return st.column_config.CheckboxColumn(column.label, pinned=pinned)
    if column.kind == "datetime":
        return st.column_config.DatetimeColumn(column.label, format=column.format,
                                               pinned=pinned)
    return st.column_config.TextColumn(column.label, pinned=pinned, width=column.width)


def show(frame: pd.DataFrame, columns: Sequence[str], pinned: Sequence[str] = ()) -> None:
    """A table of `columns` (pinned ones first, held in view), named and formatted for people."""
    order = [*pinned, *(c for c in columns if c not in pinned)]
    shown = human(frame, order)
    labels = {COLUMNS[c].label: c for c in order}
    st.dataframe(shown, hide_index=True, width="stretch",
                 column_config={label: _config(COLUMNS[labels[label]], labels[label] in pinned)
                                for label in shown.columns})
