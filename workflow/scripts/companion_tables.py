"""Snakemake script (rule companion_tables): every companion data set present -> its tables,
and a population run's percentiles.parquet, in one job (latency_divide.analysis.jobs)."""
import logging

from latency_divide.analysis.companions import companion_metas
from latency_divide.analysis.jobs import tables_job
from latency_divide.analysis.population_figures import build_percentiles

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
logging.captureWarnings(True)  # excluded trials (TrialSkipped) are named in the log
for c in snakemake.params.companions:
    key = c["key"]
    trials = snakemake.output[f"{key}__trials"]
    tables_job(companion_metas(c["configfile"], c["trials"]), trials, snakemake.threads,
               what=f"companion {c['name']}")
    percentiles = getattr(snakemake.output, f"{key}__percentiles", None)
    if percentiles is not None:  # a population run
        build_percentiles(trials, percentiles, seed=c["seed"])
        logging.info("companion %s: %s", c["name"], percentiles)
