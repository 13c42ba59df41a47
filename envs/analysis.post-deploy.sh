#!/usr/bin/env bash
# Snakemake runs this once after creating the conda environment, from the workflow's
# working directory (the repository root): install our package, without dependencies
# (they are pinned in the environment file).
set -euo pipefail
python -m pip install --quiet --no-deps .
