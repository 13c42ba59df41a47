#!/usr/bin/env bash
# The project's test command (called by `make test` and .ci/run): lint, then the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/lint.sh
exec .venv/bin/python -m pytest -ra "$@"
