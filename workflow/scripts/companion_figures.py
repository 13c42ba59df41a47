"""Snakemake script (rule companion_figures): every companion data set's figures, in one job."""
import logging

from latency_divide.analysis.jobs import figures_job

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
logging.captureWarnings(True)
for c in snakemake.params.companions:
    key = c["key"]
    figures_job(c["figures"], snakemake.input[f"{key}__trials"],
                lambda n, key=key: snakemake.output[f"{key}__{n}"],
                household=c["household"], household_order=c["household_order"])
