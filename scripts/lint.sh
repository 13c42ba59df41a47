#!/usr/bin/env bash
# Static checks: snakemake --lint, cargo fmt --check, cargo clippy -D warnings.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/snakemake --lint --cores 1
cargo fmt --all --check
cargo clippy --release --locked --quiet --workspace --all-targets -- -D warnings
