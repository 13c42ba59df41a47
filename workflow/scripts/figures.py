"""Snakemake script (rule figures): every figure (PDF, PNG, provenance sidecar) from the tables."""
import logging
from pathlib import Path

from latency_divide.analysis.figures import build_figure

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
logging.captureWarnings(True)
out = snakemake.output
for fig in snakemake.params.figures:
    rec = build_figure(
        fig,
        Path(snakemake.input.trials).parent,
        out[f"{fig}_pdf"],
        out[f"{fig}_png"],
        out[f"{fig}_provenance"],
        household=snakemake.params.household,
        household_order=snakemake.params.household_order,
    )
    logging.info("%s: %d trials of %d households", out[f"{fig}_pdf"], len(rec["trials"]),
                 sum(len(v) for v in rec["households"].values()))
