"""Snakemake script (rule live_figures): a live run's bitrate and queue figure (PDF, PNG,
provenance sidecar) from the tables and the chosen trials' sender reports."""
import logging
from pathlib import Path

from latency_divide.analysis.live_figures import build_live_figure

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
logging.captureWarnings(True)
rec = build_live_figure(Path(snakemake.input.trials).parent, snakemake.output.pdf,
                        snakemake.output.png, snakemake.output.provenance,
                        household_order=snakemake.params.household_order)
logging.info("%s: %d trials of household(s) %s", snakemake.output.pdf, len(rec["trials"]),
             sorted({t["household_id"] for t in rec["trials"]}))
