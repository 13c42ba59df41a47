"""Snakemake script (rule trial): run one trial into results/raw/... (the package does it)."""
from latency_divide.ops.workflow import run_trial_job

run_trial_job(snakemake)  # noqa: F821 (injected by Snakemake)
