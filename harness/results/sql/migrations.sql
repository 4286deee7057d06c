-- What brings the tables of a file an older engram-bench wrote up to tables.sql: run in one
-- transaction before tables.sql and views.sql replace its views and add its index.
ALTER TABLE runs ALTER COLUMN measured_input_tokens SET DATA TYPE DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS retried VARCHAR;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS rate DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS scheduled_at TIMESTAMP;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS repeat INTEGER;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS turn INTEGER;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS cached_tokens INTEGER;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS think_ms DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS tokens_per_chunk DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS tokens_per_chunk_estimated BOOLEAN;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS chunk_gap_mean_ms DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS chunk_gap_p50_ms DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS chunk_gap_p90_ms DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS chunk_gap_p99_ms DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS itl_mean_ms DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS itl_p50_ms DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS itl_p90_ms DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS itl_p99_ms DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS itl_bins SMALLINT[];
ALTER TABLE requests ADD COLUMN IF NOT EXISTS itl_counts INTEGER[];
ALTER TABLE requests ADD COLUMN IF NOT EXISTS speedup DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS trace_line INTEGER;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS trace_input_tokens INTEGER;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS trace_output_tokens INTEGER;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS input_tokens_requested INTEGER;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS output_tokens_requested INTEGER;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS trace_prefix_tokens INTEGER;
ALTER TABLE IF EXISTS client_checks ADD COLUMN IF NOT EXISTS cpu_wait_share DOUBLE;
ALTER TABLE IF EXISTS client_checks ADD COLUMN IF NOT EXISTS read_lag_mean_ms DOUBLE;
ALTER TABLE IF EXISTS user_levels ADD COLUMN IF NOT EXISTS lead_in_requests INTEGER;
ALTER TABLE IF EXISTS user_levels ADD COLUMN IF NOT EXISTS lead_in_settled BOOLEAN;
ALTER TABLE IF EXISTS user_levels ADD COLUMN IF NOT EXISTS lead_in_duty DOUBLE;
ALTER TABLE IF EXISTS server_stats ADD COLUMN IF NOT EXISTS rate DOUBLE;
ALTER TABLE IF EXISTS server_metrics ADD COLUMN IF NOT EXISTS rate DOUBLE;
ALTER TABLE IF EXISTS server_stats ADD COLUMN IF NOT EXISTS repeat INTEGER;
ALTER TABLE IF EXISTS server_metrics ADD COLUMN IF NOT EXISTS repeat INTEGER;
-- two writers of one run could store a request twice before runs were locked: keep the first
DELETE FROM requests WHERE rowid NOT IN
    (SELECT min(rowid) FROM requests GROUP BY run_id, request_id);
