"""Snakemake script (rule analysis_tables): trial directories -> results/tables/*.parquet.
The trials are checked first (DVC pins, raw format, identity): a finding stops the analysis
with every problem named, and no table is written."""
import logging
import sys
from pathlib import Path

from latency_divide.errors import LatencyDivideError
from latency_divide.analysis.tables import build_tables

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
logging.captureWarnings(True)  # excluded trials (TrialSkipped) are named in the log
dirs = [Path(m).parent for m in snakemake.input.metas]
try:
    t = build_tables(dirs, Path(snakemake.output.trials).parent, jobs=snakemake.threads)
except LatencyDivideError as e:
    logging.error("%s", e)
    sys.exit(f"[latency-divide] analysis stopped: {e}")
logging.info("tables from %d of %d trials; %d excluded (exclusions.parquet)", len(t.trials),
             len(dirs), len(t.skipped))
for e in t.skipped:
    print(f"[latency-divide] excluded trial {e}", file=sys.stderr)
