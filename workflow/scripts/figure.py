"""Snakemake script (rule figure): one figure (PDF, PNG, provenance sidecar) from the tables."""
import logging
from pathlib import Path

from latency_divide.figures import build_figure

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
logging.captureWarnings(True)
rec = build_figure(
    snakemake.params.figure,
    Path(snakemake.input.trials).parent,
    snakemake.output.pdf,
    snakemake.output.png,
    snakemake.output.provenance,
    config=snakemake.params.config,
    household=snakemake.params.household,
    household_order=snakemake.params.household_order,
)
logging.info("%s: %d trials of %d households", snakemake.output.pdf, len(rec["trials"]),
             sum(len(v) for v in rec["households"].values()))
