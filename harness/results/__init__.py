"""The results: the request row, the statistics and capacity rules (Max C, users, confidence),
the Max C search planner, the DuckDB store and the summary built from it."""
