#!/usr/bin/env bash
# The project's test command: lint, then pytest with the given arguments (`make test` passes
# -m "not slow", the quick tier; `make test-all` and .ci/run nothing: every test).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/lint.sh
# the Rust tools' own tests (the delay line's schedule, the tool's batching and fallbacks, the
# native queue sampler's netlink parsing)
cargo test --release --locked --quiet --workspace
# Two phases (tests/conftest.py, the `shared` marker): the tests that measure nothing and time
# nothing in two processes (pytest-xdist, a module to a process at a time), then every other
# test in one, each with the host to itself (real trials, the host check, the Slurm cluster).
# Both phases run whatever the first gives; the exit status is the first failure's.
# pytest's 5 is "no test selected" (a -k or -m that leaves a phase empty).
rc=0
.venv/bin/python -m pytest -ra --durations=15 -n 2 --dist loadfile --phase shared "$@" || rc=$?
[ "$rc" -eq 5 ] && rc=0
rc2=0
.venv/bin/python -m pytest -ra --durations=25 --phase alone "$@" || rc2=$?
[ "$rc2" -eq 5 ] && rc2=0
[ "$rc" -ne 0 ] && exit "$rc"
exit "$rc2"
