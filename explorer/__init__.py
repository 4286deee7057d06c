"""Streamlit + Plotly explorer over the DuckDB results: runs, compare, capacity, sizing."""
