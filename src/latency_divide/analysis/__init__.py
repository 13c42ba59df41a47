"""The analysis stage: checked trial directories -> Parquet tables -> figures with provenance.

integrity (every trial intact and the trial it claims to be, before anything is read),
reader, metrics, schemas and tables (raw trial directories -> results/tables/), figures and
provenance (results/figures/ with their sidecars, `latency-divide trace`), companions (runs
of other configs analysed beside the main one) and compare (their summaries side by side).
"""
