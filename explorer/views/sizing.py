"""The sizing arithmetic as a form, with the memory budget per tier as a stacked bar."""

import streamlit as st

from explorer import charts
from runners import sizing

st.title("Sizing")
cols = st.columns(4)
model = cols[0].selectbox("model", list(sizing.MODELS), key="sizing_model")
device = cols[1].selectbox("device", list(sizing.DEVICES), key="sizing_device")
nodes = int(cols[2].number_input("nodes", 1, 64, 1, key="sizing_nodes"))
placement = cols[3].selectbox("placement", ["auto", "device", "host", "nvme"],
                              key="sizing_placement")
spec = sizing.model_spec(model)
work = sizing.default_workload(spec, sizing.device_spec(device))
more = st.columns(3)
kv = more[0].number_input("KV + recurrent pools per node (GB)", 0.0, 1000.0,
                          float(round(work.kv_pool_gb, 2)), key=f"kv_{model}_{device}")
table_gb = more[1].number_input("Engram table (GB)", 0.0, 10_000.0, float(spec.table_gb),
                                key=f"table_{model}")
page_cache = more[2].number_input("cached table pages (GB)", 0.0, 1000.0,
                                  float(round(work.page_cache_gb, 2)),
                                  key=f"cache_{model}_{device}")
report = sizing.size(model, device, nodes, None if placement == "auto" else placement,
                     overrides={"kv_pool_gb": kv, "table_gb": table_gb,
                                "page_cache_gb": page_cache})
verdict = report["verdict"].replace("_", " ")
show = {"fits": st.success, "fits with offload": st.warning}.get(verdict, st.error)
show(f"Verdict: **{verdict}** (table on {report['placement']})")
figures = st.columns(3)
figures[0].metric("required per node (GB)", f"{report['required_gb']:.1f}")
figures[1].metric("offload tier per node (GB)", f"{report['offload_gb']:.1f}")
figures[2].metric("decode ceiling (tok/s, upper bound)",
               f"{report['decode_ceiling_tps_upper_bound']:.0f}")
st.plotly_chart(charts.sizing_budget(report), width="stretch")
if report["offload_gb"]:
    st.caption(f"Offload tier: {report['offload_bytes_per_token']} B read per token "
               f"({report['offload_tier_bytes_per_token']} B moved) over {report['offload_link']}"
               f", {report['offload_us_per_token']} us per token.")
with st.expander("every figure used"):
    st.json(report)
