"""Targets, statistic and user factors as controls; Max C and users recomputed live. A users
run (`run --mode users`) is listed by its measured Max users beside the estimate from the Max C
of a closed run of the same setup (by the chat or agentic factor set here)."""

import streamlit as st

from explorer import data, tables, ui
from harness.results.metrics import STATISTICS, TTFT_OF, Targets

st.title("Capacity")
current = ui.targets()
cols = st.columns(6)
tps_min = cols[0].number_input("TPS per request >=", 0.0, 10_000.0, current.tps_min, 1.0)
ttft_max = cols[1].number_input("TTFT (ms) <=", 1.0, 600_000.0, current.ttft_max_ms, 50.0)
statistic = cols[2].selectbox("statistic", STATISTICS, STATISTICS.index(current.statistic),
                              help="pNN: TTFT at pNN and TPS at p(100-NN); published runs "
                                   "have means only")
ttft_of = cols[3].selectbox("TTFT of", TTFT_OF, TTFT_OF.index(current.ttft_of),
                            help="first: the first token of any kind (the published method); "
                                 "output: the answer's first, after any reasoning (TTFO)")
chat = cols[4].number_input("chat users per C", 0.0, 100.0, current.chat_factor, 0.5)
agentic = cols[5].number_input("agentic users per C", 0.0, 100.0, current.agentic_factor, 0.5)
targets = Targets(tps_min, ttft_max, statistic, chat, agentic, ttft_of=ttft_of)
st.session_state["targets"] = targets

labels = ui.run_labels()
selected = st.multiselect("runs", list(labels), default=list(labels),
                          format_func=labels.__getitem__, key="capacity_runs")
levels = ui.levels_for(selected)
table = data.capacity_table(levels, targets) if not levels.empty else None
if table is None or table.empty:
    st.info("Select runs to score.")
else:
    users = ui.users_for(selected)
    table = data.with_rows(table, users)
    pub = ui.published()[0].set_index("run_id")
    table.insert(1, "source", ["published" if r in pub.index else "measured"
                               for r in table["run_id"]])
    table["published_max_c"] = [pub["published_max_c"].get(r) if r in pub.index else None
                                for r in table["run_id"]]
    best = st.columns(2)
    best[0].metric("best Max C", int(table["max_c"].max()) if table["max_c"].notna().any()
                   else "-")
    if not users.empty:
        best[1].metric("best Max users (measured)", int(users["max_users"].max()))
        st.caption("Users runs (--mode users) are judged by the highest user count U that "
                   "meets the targets, measured; the estimate beside it is the Max C of a "
                   "closed run of the same setup times the profile's users per C set above.")
    tables.show(table, ("run_id", "source", "verdict", "max_users", "estimated_users",
                        "paired_run", "measured_factor", "passing", "published_max_c",
                        "warnings"), pinned=tables.RUN_PINNED)
    ui.download("Capacity CSV", lambda: table, "capacity.csv", len(table), "capacity_csv")
