"""`make explore`: the Streamlit entrypoint; only navigation lives here."""

import streamlit as st

st.set_page_config(page_title="engram-bench explorer", layout="wide")
st.navigation([
    st.Page("views/runs.py", title="Runs", default=True),
    st.Page("views/run.py", title="Run"),
    st.Page("views/compare.py", title="Compare"),
    st.Page("views/capacity.py", title="Capacity"),
    st.Page("views/sizing.py", title="Sizing"),
    st.Page("views/reference.py", title="Published reference"),
]).run()
