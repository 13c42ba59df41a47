#!/usr/bin/env bash
# The project's test command: lint, then pytest with the given arguments (`make test` passes
# -m "not slow", the quick tier; `make test-all` and .ci/run nothing: every test).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/lint.sh
# the Rust tools' own tests (the delay line's schedule, the tool's batching and fallbacks, the
# native queue sampler's netlink parsing)
cargo test --release --locked --quiet --workspace
exec .venv/bin/python -m pytest -ra --durations=25 "$@"
