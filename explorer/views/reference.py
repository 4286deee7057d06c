"""The published deployments (facts, not measurements), scored with the same rules."""

import streamlit as st

from explorer import charts, data, tables, ui
from harness.results.metrics import capacity

st.title("Published reference")
st.caption("Published figures, as kept in results/reference/. "
           "They are shown as *published* everywhere and never mixed with measured runs.")
runs, levels = ui.published()
targets = ui.targets()
derived = data.capacity_table(levels, targets)
table = runs.merge(derived, on="run_id", how="left")
tables.show(table, ("run_id", "verdict", "published_max_c", "published_chat_users",
                    "published_agentic_users", "model", "device", "nodes", "engine", "tp",
                    "speculative", "table_placement", "passing", "warnings"),
            pinned=tables.RUN_PINNED)
labels = {r: f"published · {r}" for r in runs["run_id"]}
passing = set()
for run_id, pts in data.points(levels, "mean").items():
    passing |= {(run_id, v.concurrency) for v in capacity(pts, targets).levels if v.passes}
left, right = st.columns(2)
left.plotly_chart(charts.metric_vs_c(levels, "mean_ttft_ms", targets.ttft_max_ms,
                                     "TTFT target", passing, "mean TTFT (ms)", labels),
                  width="stretch")
right.plotly_chart(charts.metric_vs_c(levels, "mean_tps", targets.tps_min, "TPS target",
                                      passing, "mean TPS per request (tok/s)", labels),
                   width="stretch")
ui.download("Published levels CSV", lambda: levels, "published_levels.csv", len(levels),
            "reference_levels")
