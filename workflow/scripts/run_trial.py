"""Snakemake script (rule trial): run one trial into results/raw/... (the package does it)."""
from latency_divide.workflow_glue import run_trial_job

run_trial_job(snakemake)  # noqa: F821 (injected by Snakemake)
