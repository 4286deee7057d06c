"""Two or more runs overlaid, with the per-C difference against a baseline run, and one server
metric (from /metrics) of every run that recorded it. Users runs (`run --mode users`) are drawn
against the user count U and judged by Max users; runs of different prompt lengths say so. The
first two runs get the placement verdict `compare` prints: what moving the table did."""

from pathlib import Path

import pandas as pd
import streamlit as st

from explorer import charts, data, literal, tables, ui
from harness.results.metrics import Targets, capacity
from harness.results.placement import NOT_INTERLEAVED, PlacementError, Verdict
from harness.results.render_placement import rows
from harness.results.store import Store, StoreError
from harness.results.stored_summary import stored_verdict


@st.cache_data(show_spinner=False, max_entries=16)
def _clusters(path: str, version: tuple | None, run_ids: tuple[str, ...]) -> pd.DataFrame:
    return data.cluster_sums(Path(path), list(run_ids))


@st.cache_data(show_spinner=False, max_entries=16)
def _bands(path: str, version: tuple | None, run_ids: tuple[str, ...]) -> pd.DataFrame:
    return data.level_bands(_clusters(path, version, run_ids))


@st.cache_data(show_spinner=False, max_entries=16)
def _verdict(path: str, version: tuple | None, run_a: str, run_b: str,
             targets: Targets) -> Verdict | str:
    """The placement verdict of run B against run A, or the sentence why there is none (a
    published run has no stored figures to give one)."""
    try:
        return stored_verdict(Store(Path(path), lock_timeout_s=10), run_a, run_b, targets)
    except (PlacementError, StoreError) as exc:
        return str(exc)


def _show_verdict(run_a: str, run_b: str, targets: Targets, more: bool) -> None:
    st.subheader("Placement verdict")
    path, version = ui.database()
    found = _verdict(str(path), version, run_a, run_b, targets)
    if isinstance(found, str):
        st.info(found)
        return
    st.markdown(literal.markdown(found.paragraph))
    st.dataframe(pd.DataFrame(rows(found), columns=["figure", "A", "B", "B - A"]),
                 hide_index=True, width="stretch")
    st.caption(f"A: {run_a}, B: {run_b}" + (" (the first two runs chosen)" if more else "")
               + f"; the same as `engram-bench compare A B`. {NOT_INTERLEAVED}")


st.title("Compare")
labels = ui.run_labels()
choices = list(labels)
default = choices[:2]
selected = st.multiselect("runs (the first is the baseline)", choices, default=default,
                          format_func=labels.__getitem__, key="compare_runs")
if len(selected) < 2:
    st.info("Pick two or more runs; measured and published runs can be mixed.")
else:
    ui.report_download(selected, "compare_report")
    levels = ui.levels_for(selected)
    if levels.empty:
        st.info("The chosen runs have stored no finished round yet.")
    else:
        targets = ui.targets()
        users = ui.users_for(selected)
        user_runs = set(users["run_id"])
        caps = data.with_rows(data.capacity_table(levels, targets), users)
        runs = ui.measured_runs()
        prompts = (runs[runs["run_id"].isin(selected)].set_index("run_id")["input_tokens"]
                   .dropna() if not runs.empty else None)
        if prompts is not None and prompts.nunique() > 1:  # long context: say which is which
            labels = {**labels, **{r: f"{labels[r]} · {int(n)} prompt tokens"
                                   for r, n in prompts.items()}}
            caps = caps.merge(prompts.reset_index(), on="run_id", how="left")
        if user_runs:
            st.caption("Users runs (--mode users) are drawn against the user count U, the "
                       "others against concurrency C: a user thinks between requests, so U "
                       "users load the server less than C=U.")
        passing = set()
        for run_id, pts in data.points(levels, targets.statistic, targets.ttft_of).items():
            passing |= {(run_id, v.concurrency) for v in capacity(pts, targets).levels if v.passes}
        path, version = ui.database()
        bands = _bands(str(path), version, tuple(selected))
        left, right = st.columns(2)
        left.plotly_chart(charts.metric_vs_c(
            levels, "mean_ttft_ms", targets.ttft_max_ms, "TTFT target", passing, "mean TTFT (ms)",
            labels, bands[bands["metric"] == "ttft"], user_runs), width="stretch")
        right.plotly_chart(charts.metric_vs_c(
            levels, "mean_tps", targets.tps_min, "TPS target", passing,
            "mean TPS per request (tok/s)", labels, bands[bands["metric"] == "tps"], user_runs),
            width="stretch")
        if "mean_tpot_ms" in levels and levels["mean_tpot_ms"].notna().any():
            st.subheader("Token timing")
            st.caption("TPOT and token-weighted ITL (a chunk of k tokens counts as k gaps), "
                       "one color per run; a red cross marks a client-bound level.")
            left, right = st.columns(2)
            left.plotly_chart(charts.figures_vs_c(
                levels, {"mean_tpot_ms": "TPOT mean", "p99_itl_ms": "ITL p99"},
                "ms per output token", labels, user_runs), width="stretch")
            right.plotly_chart(charts.figures_vs_c(
                levels, {"p50_e2e_ms": "E2E p50", "p99_e2e_ms": "E2E p99"},
                "end-to-end latency (ms)", labels, user_runs), width="stretch")
        fig, _ = charts.percent_difference(levels, selected[0], labels, user_runs)
        st.subheader(f"Difference against {literal.markdown(labels[selected[0]])}")
        st.plotly_chart(fig, width="stretch")
        diff = data.differences(levels, _clusters(str(path), version, tuple(selected)),
                                selected[0])
        if user_runs == set(selected):  # users runs only: their levels are user counts
            diff = diff.rename(columns={"concurrency": "users"})
        tables.show(diff, [("users" if c == "concurrency" and "users" in diff else c)
                           for c in data.DIFF_COLUMNS])
        st.caption("Intervals come from each run's repeats (`run --repeat N`): 95% bootstrap "
                   "over (repeat, round) clusters, or the range over repeats with fewer than 20 "
                   "clusters. \"within noise\": the interval spans 0. \"single run\": a run "
                   "without repeats gets the difference only, no verdict.")
        st.subheader("Capacity")
        tables.show(caps, ("run_id", "verdict", "max_users", "estimated_users", "input_tokens",
                           "passing", "warnings"), pinned=tables.RUN_PINNED)
        ui.download("Levels CSV", lambda: levels, "compare_levels.csv", len(levels),
                    "compare_levels")
        _show_verdict(selected[0], selected[1], targets, len(selected) > 2)
        st.subheader("Server metrics")
        figures = data.server_figures(ui.database()[0], selected)
        columns = data.server_columns(figures)
        if not columns:
            st.caption("None of the chosen runs recorded server metrics (Prometheus /metrics).")
        else:
            names = {k: label for k, (label, _) in data.SERVER_FIGURES.items()}
            chosen = st.selectbox("server metric", columns, format_func=lambda c: names.get(c, c),
                                  key="compare_server_metric")
            st.plotly_chart(charts.server_metric_vs_c(figures, chosen, names.get(chosen, chosen),
                                                      labels), width="stretch")
            shown = set(figures.loc[figures[chosen].notna(), "run_id"])
            if without := [labels[r] for r in selected if r not in shown]:
                st.caption(f"Not recorded for: {literal.markdown('; '.join(without))}.")
