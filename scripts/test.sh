#!/usr/bin/env bash
# The project's test command: lint, the Rust tools' own tests, then pytest with the given
# arguments (`make test` passes -m "not slow", the quick tier; `make test-all` and .ci/run
# nothing: every test).
#
# pytest runs in two phases (tests/conftest.py, the `shared` marker): first the tests that
# measure nothing and time nothing, in two processes (pytest-xdist, a module to a process at a
# time, in the order tests/conftest.py gives them: the modules with the most slow tests first;
# --no-loadscope-reorder keeps xdist from ordering them by their count of tests alone), with the
# lint and `cargo test` beside them; then every other test in one process, each with the host
# to itself (real trials, the host check, the Slurm cluster). Every step runs whatever an
# earlier one gave; the exit status is the first failure's. pytest's 5 is "no test selected"
# (a -k or -m that leaves a phase empty).
set -uo pipefail
cd "$(dirname "$0")/.."
checks_log=$(mktemp -t ld-test-checks.XXXXXX)
trap 'rm -f "$checks_log"' EXIT
# the static checks, then the Rust tools' own tests (the delay line's schedule, the tool's
# batching and fallbacks, the native queue sampler's netlink parsing)
(./scripts/lint.sh && cargo test --release --locked --quiet --workspace) >"$checks_log" 2>&1 &
checks_pid=$!
rc_shared=0
.venv/bin/python -m pytest -ra --durations=15 -n 2 --dist loadfile --no-loadscope-reorder --phase shared "$@" \
  || rc_shared=$?
[ "$rc_shared" -eq 5 ] && rc_shared=0
rc_checks=0
wait "$checks_pid" || rc_checks=$?
echo "== lint and cargo test (run beside the shared tests): exit status $rc_checks"
cat "$checks_log"
rc_alone=0
.venv/bin/python -m pytest -ra --durations=25 --phase alone "$@" || rc_alone=$?
[ "$rc_alone" -eq 5 ] && rc_alone=0
for rc in "$rc_checks" "$rc_shared" "$rc_alone"; do
  [ "$rc" -ne 0 ] && exit "$rc"
done
exit 0
