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
# Snakemake job recompiles pandas, pyarrow and plotnine from source (seconds per job). The
# packages' own test suites are left out (nothing here imports them). It runs beside the Rust
# build below, which leaves part of the 2 cores idle; the stamp is written once it has ended.
pyc_stamp=.venv/.bytecode.sha256
pyc_pid=
if [ "$(cat "$pyc_stamp" 2>/dev/null)" != "$want" ]; then
  log "byte-compiling .venv (beside the Rust build)"
  .venv/bin/python -m compileall -q -j 0 -x 'site-packages/[^/]+/(.*/)?tests?/' \
    .venv/lib/python3*/site-packages >/dev/null 2>&1 &
  pyc_pid=$!
fi
ssl_tmp= tgt_tmp=
# on any exit: the byte-compiling stopped, a half-copied cache entry or target/ removed
trap '[ -z "$pyc_pid" ] || kill "$pyc_pid" 2>/dev/null || true
      [ -z "$ssl_tmp" ] || rm -rf "$ssl_tmp"; [ -z "$tgt_tmp" ] || rm -rf "$tgt_tmp"' EXIT
.venv/bin/python -m compileall -q src >/dev/null

# --- Rust tools -------------------------------------------------------------------------
if ! command -v cargo >/dev/null 2>&1; then
  log "cargo not found: install Rust (https://rustup.rs) or Debian's cargo package"
  exit 1
fi
# BoringSSL, which tquic's build script compiles (about 1 of the build's 2 minutes on 2 cores),
# is kept in this machine's cache after the first build and linked from there by the next
# clone's (tquic's build script takes a built BoringSSL from BORINGSSL_LIB_DIR): the same two
# static libraries, keyed by everything that went into them. LATENCY_DIVIDE_NO_BUILD_CACHE=1
# builds it in the clone and leaves the cache alone; removing the cache directory is safe.
ssl_cache=${XDG_CACHE_HOME:-$HOME/.cache}/latency-divide/boringssl
ssl_key=$({
  grep -A3 '^name = "tquic"$' Cargo.lock
  sed -n '/^\[profile\.release\]/,/^\[/p' Cargo.toml
  rustc -vV; cmake --version; cc --version; c++ --version; uname -m
  env | grep -E '^(CC|CXX|CFLAGS|CXXFLAGS|LDFLAGS|CMAKE_[A-Z_]+|TARGET_[A-Z_]+)=' | sort || true
} 2>&1 | sha256sum | cut -c1-16)
ssl_dir=$ssl_cache/$ssl_key
use_cache=${LATENCY_DIVIDE_NO_BUILD_CACHE:+no}
ours=(-p tquic-perf -p delayline -p qsampler -p hostprobe)
# the directory tquic's build in target directory $1 linked BoringSSL from (empty: none)
tquic_link() {
  local out
  for out in "$1"/build/tquic-*/output; do
    if [ -f "$out" ]; then
      sed -n '/^cargo:rustc-link-search=native=/{s///p;q}' "$out"
      return
    fi
  done
}
# The crates.io crates (all but ours: about 45 s of a clone's build on 2 cores, BoringSSL aside)
# come from this machine's last build: a clone with no target/ starts from a copy of its
# target/release, ours removed from it (`cargo clean -p`: they are always built from this
# clone's sources), and cargo's own checks (each crate's version, rustc, profile, flags) decide
# what is current. One entry (about 750 MB), keyed by BoringSSL's key and Cargo.lock.
tgt_cache=${XDG_CACHE_HOME:-$HOME/.cache}/latency-divide/target
tgt_key=$({ echo "$ssl_key"; cat Cargo.lock; } | sha256sum | cut -c1-16)
tgt_dir=$tgt_cache/$tgt_key
seeded=no
if [ "$use_cache" != no ] && ! [ -e target ] && [ -d "$tgt_dir/release" ] \
    && [ -f "$ssl_dir/libssl.a" ] && [ -f "$ssl_dir/libcrypto.a" ]; then
  tgt_tmp=$(mktemp -d ./.ld-target.XXXXXX)
  chmod "$(umask -S)" "$tgt_tmp"  # target/ as cargo would make it (mktemp's is the owner's only)
  if cp -a "$tgt_dir/release" "$tgt_tmp/release" && mv -T "$tgt_tmp" target; then
    tgt_tmp= seeded=yes
    cargo clean --release --locked --quiet "${ours[@]}"
    log "target/ copied from this machine's last build ($tgt_dir): building ours"
  fi
fi
# tquic is linked again when the BoringSSL its build linked is gone, or (a copied target/) is
# not the cache's
dir=$(tquic_link target/release)
if [ -n "$dir" ] && { ! [ -f "$dir/libssl.a" ] || { [ "$seeded" = yes ] && [ "$dir" != "$ssl_dir" ]; }; }
then
  log "tquic's build linked BoringSSL from $dir: rebuilding tquic"
  cargo clean --release --locked --quiet -p tquic
fi
if [ "$use_cache" != no ] && [ -f "$ssl_dir/libssl.a" ] && [ -f "$ssl_dir/libcrypto.a" ]; then
  export BORINGSSL_LIB_DIR=$ssl_dir
  log "building the Rust tools (BoringSSL from this machine's cache, $ssl_dir)"
else
  log "building the Rust tools (the first build compiles BoringSSL: 1-3 min)"
fi
# the build's messages name the directory tquic's build script linked BoringSSL from
ssl_built=$(cargo build --release --locked --quiet --message-format=json-render-diagnostics \
    "${ours[@]}" | .venv/bin/python -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    pkg = m.get("package_id", "")
    is_tquic = "#tquic@" in pkg or pkg.startswith("tquic ")
    if m.get("reason") == "build-script-executed" and is_tquic:
        print(*(p.split("=", 1)[-1] for p in m["linked_paths"][:1]))')
# kept: what this clone's build compiled, or an entry of the same key (another cache's)
case "$ssl_built" in
  "$PWD"/target/*|*/"$ssl_key"|*/"$ssl_key"/) ssl_ours=yes ;;
  *) ssl_ours=no ;;
esac
if [ "$use_cache" != no ] && [ -z "${BORINGSSL_LIB_DIR:-}" ] && ! [ -d "$ssl_dir" ] \
    && [ "$ssl_ours" = yes ] && [ -f "$ssl_built/libssl.a" ] && [ -f "$ssl_built/libcrypto.a" ]
then
  # copied whole into a temporary directory, then renamed into place
  mkdir -p "$ssl_cache"
  ssl_tmp=$(mktemp -d "$ssl_cache/.tmp.XXXXXX")
  cp "$ssl_built/libssl.a" "$ssl_built/libcrypto.a" "$ssl_tmp/"
  if mv -T "$ssl_tmp" "$ssl_dir" 2>/dev/null; then
    ssl_tmp=
    log "kept BoringSSL for the next clone's build: $ssl_dir"
  fi
fi
# kept for the next clone (above); an entry whose tquic links a BoringSSL other than the cache's
# is replaced by a build whose tquic links the cache's
if [ "$use_cache" != no ] && [ -f "$ssl_dir/libssl.a" ] && { ! [ -d "$tgt_dir" ] || {
     [ "${ssl_built%/}" = "$ssl_dir" ] && [ "$(tquic_link "$tgt_dir/release")" != "$ssl_dir" ]; }; }
then
  mkdir -p "$tgt_cache"
  tgt_tmp=$(mktemp -d "$tgt_cache/.tmp.XXXXXX")
  # under cargo's lock of target/release: no cargo writes into it while it is copied
  if flock target/release/.cargo-lock cp -a target/release "$tgt_tmp/release"; then
    old=$tgt_cache/.old.$$
    [ -d "$tgt_dir" ] && mv -T "$tgt_dir" "$old"
    if mv -T "$tgt_tmp" "$tgt_dir" 2>/dev/null; then
      tgt_tmp=
      log "kept this build's crates for the next clone's: $tgt_dir"
    fi
    rm -rf "$old"
    for entry in "$tgt_cache"/*; do  # one entry
      [ "$entry" = "$tgt_dir" ] || rm -rf "$entry"
    done
  fi
fi
if [ -n "$pyc_pid" ]; then
  wait "$pyc_pid" || true  # a file that does not compile is compiled (and fails) at import
  pyc_pid=
  echo "$want" > "$pyc_stamp"
fi
log "ready: .venv/bin/latency-divide, target/release/tquic-perf, target/release/delayline, target/release/qsampler, target/release/hostprobe, target/release/stallinject"
