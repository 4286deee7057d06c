"""One run: TTFT and TPS against C with the targets, per-level table, distributions,
first round against the rest, and the server's Engram counters."""

import streamlit as st

from explorer import charts, data, ui
from harness.metrics import capacity

st.title("Run")
labels = ui.run_labels()
if not labels:
    ui.empty_state()
else:
    run_id = st.selectbox("run", list(labels), format_func=labels.get, key="run_id")
    levels = ui.levels_for([run_id])
    targets = ui.targets()
    points = data.points(levels, targets.statistic).get(run_id, [])
    cap = capacity(points, targets)
    passing = {(run_id, v.concurrency) for v in cap.levels if v.passes}
    cols = st.columns(4)
    cols[0].metric("Max C", cap.max_c)
    cols[1].metric("chat users", cap.chat_users)
    cols[2].metric("agentic users", cap.agentic_users)
    cols[3].metric("levels", len(levels))
    for warning in cap.warnings:
        st.warning(warning)
    left, right = st.columns(2)
    left.plotly_chart(charts.metric_vs_c(
        levels, "mean_ttft_ms", targets.ttft_max_ms, f"TTFT target {targets.ttft_max_ms:g} ms",
        passing, "mean TTFT (ms)", labels), width="stretch")
    right.plotly_chart(charts.metric_vs_c(
        levels, "mean_tps", targets.tps_min, f"TPS target {targets.tps_min:g}", passing,
        "mean TPS per request (tok/s)", labels), width="stretch")
    verdicts = {v.concurrency: v for v in cap.levels}
    table = levels.drop(columns=["source"], errors="ignore").copy()
    table["passes"] = [verdicts[int(c)].passes for c in table["concurrency"]]
    table["fails_because"] = [verdicts[int(c)].reason for c in table["concurrency"]]
    st.subheader("Per level")
    st.dataframe(table, hide_index=True, width="stretch")
    ui.download("Levels CSV", lambda: table, f"{run_id}_levels.csv", len(table), "run_levels")
    if run_id in set(ui.published()[0]["run_id"]):
        st.info("A published run: only its per-level means are known.")
    else:
        path, _ = ui.database()
        st.subheader("Per-request distribution")
        metric = st.radio("metric", ["ttft_ms", "tps"], horizontal=True, key="run_dist")
        dist = data.request_distribution(path, run_id, metric)
        st.plotly_chart(charts.distribution(
            dist, "TTFT (ms)" if metric == "ttft_ms" else "TPS per request"),
            width="stretch")
        st.subheader("First round against the rest")
        st.plotly_chart(charts.first_vs_rest(data.first_round_vs_rest(path, run_id),
                                             "mean_tps", "mean TPS per request"),
                        width="stretch")
        counters = data.server_counters(path, run_id)
        st.subheader("Server Engram counters per level")
        if counters.empty:
            st.caption("The server recorded no Engram counters (not the bundled server).")
        else:
            st.dataframe(counters, hide_index=True, width="stretch")
        n_requests = int(levels["requests"].sum())
        ui.download("Requests CSV", lambda: data.requests_frame(path, [run_id]),
                    f"{run_id}_requests.csv", n_requests, "run_requests")
