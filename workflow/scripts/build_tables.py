"""Snakemake script (rule analysis_tables): trial directories -> results/tables/*.parquet."""
import logging
from pathlib import Path

from latency_divide.tables import build_tables

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
logging.captureWarnings(True)  # skipped trials (TrialSkipped) are named in the log
dirs = [Path(m).parent for m in snakemake.input.metas]
t = build_tables(dirs, Path(snakemake.output.trials).parent, jobs=snakemake.threads)
logging.info("tables from %d of %d trials; %d skipped", len(t.trials), len(dirs), len(t.skipped))
for e in t.skipped:
    logging.warning("skipped trial %s", e)
