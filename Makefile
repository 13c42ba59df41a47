# Quick start: `make all` (set up, then run the default workflow) and `make test`.
.PHONY: setup all quick test lint clean lock
SNAKEMAKE = .venv/bin/snakemake
CORES ?= 1

setup:
	./scripts/setup.sh

all: setup
	$(SNAKEMAKE) --cores $(CORES) all

quick: setup
	$(SNAKEMAKE) --cores $(CORES) --configfile config/quick.yaml all

test: setup
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
