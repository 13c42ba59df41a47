"""Snakemake script (rule analysis_tables): trial directories -> results/tables/*.parquet.
The trials are checked first (DVC pins, raw format, identity): a finding stops the analysis
with every problem named, and no table is written (latency_divide.analysis.jobs)."""
import logging

from latency_divide.analysis.jobs import tables_job

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
logging.captureWarnings(True)  # excluded trials (TrialSkipped) are named in the log
tables_job(snakemake.params.metas, snakemake.output.trials, snakemake.threads)
