#!/usr/bin/env bash
# Set up everything latency-divide needs on a fresh Debian/Ubuntu machine; safe to re-run.
#  - Debian packages (iproute2, ping, ethtool, openssh, build tools, munge and Slurm for the
#    test cluster) when missing (needs root)
#  - .venv/ with the pinned Python dependencies (requirements.lock) and our package
#  - the Rust tools (cargo workspace, Cargo.lock) built in release mode into target/release/
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*" >&2; }

# --- Debian packages -------------------------------------------------------------------
# program -> package that provides it
declare -A NEED=(
  [ip]=iproute2 [tc]=iproute2 [ping]=iputils-ping [ethtool]=ethtool
  [sshd]=openssh-server [ssh]=openssh-client [cmake]=cmake [g++]=g++ [git]=git
  # the one-host Slurm test cluster (latency_divide.ops.slurmlab, tests/test_slurm.py)
  [munged]=munge [slurmctld]=slurmctld [slurmd]=slurmd [sbatch]=slurm-client
)
missing=()
for prog in "${!NEED[@]}"; do
  if ! command -v "$prog" >/dev/null 2>&1 && ! [ -x "/usr/sbin/$prog" ]; then
    missing+=("${NEED[$prog]}")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  if [ "$(id -u)" -ne 0 ]; then
    log "missing Debian packages: ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}"
    exit 1
  fi
  log "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- Python environment ----------------------------------------------------------------
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  log "Python >= 3.11 is required (found $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11"
  exit 1
fi
if ! command -v uv >/dev/null 2>&1; then
  log "installing uv (PyPI) for the pinned environment"
  "$PY" -m pip install --quiet --disable-pip-version-check uv==0.13.9
fi
UV=$(command -v uv || echo "$("$PY" -m site --user-base)/bin/uv")
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  "$UV" venv --quiet --python "$PY" .venv
fi
stamp=.venv/.requirements.lock.sha256
want=$(sha256sum requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing pinned Python dependencies (requirements.lock)"
  "$UV" pip sync --quiet --python .venv/bin/python requirements.lock
  "$UV" pip install --quiet --python .venv/bin/python --no-deps -e .
  echo "$want" > "$stamp"
fi
# Byte-compile the environment once (and our package on every run: it is quick). Python reads
# .pyc files even where PYTHONDONTWRITEBYTECODE keeps it from writing them; without them every
# Snakemake job recompiles pandas, pyarrow and plotnine from source (seconds per job).
pyc_stamp=.venv/.bytecode.sha256
if [ "$(cat "$pyc_stamp" 2>/dev/null)" != "$want" ]; then
  log "byte-compiling .venv"
  .venv/bin/python -m compileall -q -j 0 .venv/lib/python3*/site-packages >/dev/null 2>&1 || true
  echo "$want" > "$pyc_stamp"
fi
.venv/bin/python -m compileall -q src >/dev/null

# --- Rust tools -------------------------------------------------------------------------
if ! command -v cargo >/dev/null 2>&1; then
  log "cargo not found: install Rust (https://rustup.rs) or Debian's cargo package"
  exit 1
fi
log "building the Rust tools (first build compiles BoringSSL: ~3 min)"
cargo build --release --locked --quiet -p tquic-perf -p delayline -p qsampler -p hostprobe
log "ready: .venv/bin/latency-divide, target/release/tquic-perf, target/release/delayline, target/release/qsampler, target/release/hostprobe, target/release/stallinject"
