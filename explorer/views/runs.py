"""Every measured run: Max C, users and the verdict first, then what ran (mode, users
profile, turns, prompt and output tokens) and its C=1 figures; filters; CSV. A rate run shows
its sustainable request rate instead of Max C, a users run its measured Max users beside the
estimate from a closed run's Max C."""

import streamlit as st

from explorer import data, literal, rate, tables, ui

RUN_COLUMNS = ("run_id", "verdict", "max_rate", "max_users", "estimated_users", "device",
               "engine", "model", "table_placement", "mode", "profile", "turns", "input_tokens",
               "output_tokens", "label", "status", "started_at", "tps_c1", "ttft_c1_ms")

st.title("Runs")
if not ui.empty_state():
    runs = ui.measured_runs()
    cols = st.columns(4)
    chosen = {}
    for col, field in zip(cols, ("device", "engine", "model", "status"), strict=True):
        options = sorted(v for v in runs[field].dropna().unique() if v)
        chosen[field] = col.multiselect(field, options, key=f"runs_{field}",
                                        format_func=literal.shorten)
    shown = runs
    for field, values in chosen.items():
        if values:
            shown = shown[shown[field].isin(values)]
    run_ids = list(shown["run_id"])
    levels = ui.levels_for(run_ids)
    targets = ui.targets()
    cap = data.capacity_table(levels, targets)
    c1 = (levels[levels["concurrency"] == 1][["run_id", "mean_tps", "mean_ttft_ms"]]
          .rename(columns={"mean_tps": "tps_c1", "mean_ttft_ms": "ttft_c1_ms"})
          if not levels.empty else None)
    rates = rate.rate_table(levels, targets)  # rate runs: the sustainable rate, no Max C
    users = ui.users_for(run_ids)  # users runs: Max users measured, no Max C
    cap = data.with_rows(data.with_rows(cap, rates), users)
    table = shown.merge(cap, on="run_id", how="left")
    if c1 is not None:
        table = table.merge(c1, on="run_id", how="left")
    st.metric("runs shown", len(table))
    st.caption(f"Max C and users at TPS >= {targets.tps_min:g}, TTFT <= "
               f"{targets.ttft_max_ms:g} ms ({targets.statistic}); change them on Capacity.")
    if not rates.empty:
        st.caption("A rate run (--mode rate) has no Max C or users, which need a concurrency: "
                   "its verdict and max rate give the sustainable request rate.")
    if not users.empty:
        st.caption("A users run (--mode users) counts simulated users U, not concurrency: its "
                   "Max users is measured, beside the estimate from the Max C of a closed run "
                   "of the same setup.")
    tables.show(table, RUN_COLUMNS, pinned=tables.RUN_PINNED)
    path, _ = ui.database()
    ui.download("Levels CSV", lambda: levels.drop(columns=["source"], errors="ignore"),
                "levels.csv", len(levels), "runs_levels")
    requests_rows = int(levels["requests"].sum()) if not levels.empty else 0
    ui.download("Requests CSV", lambda: data.requests_frame(path, run_ids), "requests.csv",
                requests_rows, "runs_requests")
