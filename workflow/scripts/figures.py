"""Snakemake script (rule figures): every figure (PDF, PNG, provenance sidecar) from the tables
(in as many processes as the rule's threads: analysis.jobs.draw_figures)."""
import logging

from latency_divide.analysis.jobs import figures_job

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
logging.captureWarnings(True)
figures_job(snakemake.params.figures, snakemake.input.trials, lambda n: snakemake.output[n],
            household=snakemake.params.household, household_order=snakemake.params.household_order,
            processes=snakemake.threads)
