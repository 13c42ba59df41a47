# Quick start: `make quick` (set up, then a small real run) and `make test` (lint and the quick
# test tier); `make all` runs the paper's experiment, `make test-all` every test (CI).
# A snakemake target goes before --configfile: --configfile takes every following word as a file.
.PHONY: setup all quick test test-all lint clean lock
SNAKEMAKE = .venv/bin/snakemake
CORES ?= 1

setup:
	./scripts/setup.sh

all: setup
	$(SNAKEMAKE) --cores $(CORES) all

quick: setup
	$(SNAKEMAKE) --cores $(CORES) all --configfile config/quick.yaml

# The quick tier: every test not marked slow (each at most 30 s, tests/conftest.py).
test: setup
	./scripts/test.sh -m "not slow"

# Everything: the slow tier too (real sweeps, the Slurm cluster, the published re-analysis).
test-all: setup
	./scripts/test.sh

lint: setup
	./scripts/lint.sh

clean: setup
	.venv/bin/latency-divide clean

# Re-record dvc.lock after a change of a DVC stage's dependencies (code, config, raw data):
# rebuild the tables and figures from the pulled raw data, then `dvc commit` both stages.
lock: setup
	.venv/bin/dvc pull --quiet
	LATENCY_DIVIDE_FORBID_TRIALS=1 $(SNAKEMAKE) --cores 2 analysis
	.venv/bin/dvc commit --force --quiet trials analysis
