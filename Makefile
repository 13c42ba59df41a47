# Quick start: `make all` (set up, then run the default workflow) and `make test`.
.PHONY: setup all quick test lint clean
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
