"""Snakemake script (rule percentiles): trials table -> percentiles.parquet (the package does it)."""
import logging

from latency_divide.analysis.population_figures import build_percentiles

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")  # noqa: F821
t = build_percentiles(snakemake.input.trials, snakemake.output.percentiles,  # noqa: F821
                      seed=snakemake.params.seed)  # noqa: F821
logging.info("%d rows", len(t))
