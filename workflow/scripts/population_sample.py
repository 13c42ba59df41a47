"""Snakemake script (rule population_sample): the population draw as a table (the package does it)."""
from latency_divide.links.population import write_population_sample

p = snakemake.params  # noqa: F821 (injected by Snakemake)
write_population_sample(p.population, p.buckets, p.seed, p.qfactor, snakemake.input.data,  # noqa: F821
                        snakemake.output.table, snakemake.log[0])  # noqa: F821
