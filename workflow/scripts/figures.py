"""Snakemake script (rule figures): every figure (PDF, PNG, provenance sidecar) from the tables."""
import logging
from pathlib import Path

from latency_divide.analysis.figures import build_figure
from latency_divide.analysis.population_figures import POPULATION_FIGURES, build_population_figure

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
logging.captureWarnings(True)
out = snakemake.output
tables = Path(snakemake.input.trials).parent
for fig in snakemake.params.figures:
    if fig in POPULATION_FIGURES:  # a population run's (the percentile view)
        rec = build_population_figure(fig, tables, out[f"{fig}_pdf"], out[f"{fig}_png"],
                                      out[f"{fig}_provenance"])
    else:
        rec = build_figure(fig, tables, out[f"{fig}_pdf"], out[f"{fig}_png"],
                           out[f"{fig}_provenance"], household=snakemake.params.household,
                           household_order=snakemake.params.household_order)
    logging.info("%s: %d trials of %d households", out[f"{fig}_pdf"], len(rec["trials"]),
                 sum(len(v) for v in rec["households"].values()))
