#!/usr/bin/env bash
# The real-NCCL check of linkguard in one command (CONTRIBUTING.md, "GPU check").
#
#   tests/gpu/run_nccl_check.sh [--dry-run] [nccl_check.py options, see its --help]
#
# As root on a machine with a GPU: two processes on the one GPU, each in its own network
# namespace of a 2-host x 2-rail lab and with its own NCCL_HOSTID (two hosts to NCCL), a
# linkguardd per host, torch.distributed (NCCL backend) all-reducing through
# libnccl-net-linkguard.so (NCCL_NET_PLUGIN by path, NCCL_NET=linkguard: no silent fallback).
# The rail under NCCL's device is cut in host a mid-loop and restored; every element of every
# iteration is checked. Then all-reduce bus bandwidth 1..256 MiB through linkguard against
# NCCL's socket transport (NCCL_NET=Socket on rail0). Writes $OUT/result.json, the failover
# phase's NCCL logs, logs.tar.gz and console.log. Exit 0: pass, 1: fail, 2: cannot run.
# The lab is always torn down (the harness, and this script's trap if the harness was killed);
# the whole run is bounded by LG_GPU_TIMEOUT_S (default 420 s; about 3 minutes expected, not
# yet measured on a GPU).
#
# Set-up, each step only when needed (the device machine has no network; .gpu/ is made here
# by `make gpu-prep` and carried):
#   - gRPC stubs (git-ignored): copied from .gpu/stubs into daemon/linkguard/v1
#   - the daemon's shm library: gcc; else .gpu/prebuilt
#   - the plugin and lg_shm_dump (and for --dry-run lg_nccl_driver and lgtcp): make -C plugin;
#     else .gpu/prebuilt
#   - the daemon's Python packages: .gpu/wheels installed into /tmp/lg-gpu-site when this
#     python cannot import them (only the daemon and harness see them, never the ranks)
#   - ip (iproute2): .gpu/tools when the machine has none
#   - linkguardd: tests/gpu/bin/linkguardd when no console script is installed
# --dry-run: no GPU, no torch: lg_nccl_driver stands in for the ranks (make test runs this).
# Environment: OUT (default /tmp/lg-gpu-out), PYTHON (harness and daemons; default python3),
# LG_GPU_RANK_PYTHON (the ranks, one with torch; default PYTHON), LG_GPU_TIMEOUT_S.
set -uo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO" || exit 2
OUT=${OUT:-/tmp/lg-gpu-out}
PY=$(command -v "${PYTHON:-python3}") || { echo "run_nccl_check: no ${PYTHON:-python3}"; exit 2; }
LIMIT=${LG_GPU_TIMEOUT_S:-420}
CARRY=$REPO/.gpu
dry=0
for arg in "$@"; do [ "$arg" = --dry-run ] && dry=1; done
mkdir -p "$OUT"
exec > >(tee "$OUT/console.log") 2>&1

say() { echo "run_nccl_check: $*"; }
die() { say "$*"; exit 2; }

[ "$(id -u)" = 0 ] || die "must run as root (network namespaces)"
[[ "$LIMIT" =~ ^[0-9]+$ ]] && [ "$LIMIT" -ge 90 ] || die "LG_GPU_TIMEOUT_S=$LIMIT: seconds, >= 90"
WORK=$(mktemp -d /tmp/lg-gpu-work-XXXXXX)
PREFIX=lgg$(od -An -N2 -tx2 /dev/urandom | tr -d ' \n')
export PYTHONPATH="$REPO/daemon:$REPO/cli:$REPO/lab:$REPO${PYTHONPATH:+:$PYTHONPATH}"

cleanup() {
    local rc=$?
    # The harness tears its lab down itself; this is for a harness that was killed.
    "$PY" -m linkguard_lab down --prefix "$PREFIX" >/dev/null 2>&1
    rm -f /dev/shm/"$PREFIX"-*
    [ -e "$OUT/logs.tar.gz" ] || tar -czf "$OUT/logs.tar.gz" -C "$WORK" . 2>/dev/null
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT  # during set-up; the check itself gets the signal forwarded (below)

# --- set-up -----------------------------------------------------------------------------------
if [ ! -e daemon/linkguard/v1/linkguard_pb2.py ]; then
    [ -d "$CARRY/stubs" ] || die "no gRPC stubs: run make build here (or make gpu-prep)"
    cp "$CARRY"/stubs/*.py daemon/linkguard/v1/
fi

shm_lib='import importlib.util as u, sys; sys.exit(u.find_spec("linkguardd._lgshm") is None)'
if ! "$PY" -c "$shm_lib" 2>/dev/null; then
    gcc -shared -fPIC -std=c11 -O2 -D_GNU_SOURCE -Iplugin/include plugin/src/daemon/shm_writer.c \
        plugin/src/daemon/shm_reader.c -o daemon/linkguardd/_lgshm.so >>"$WORK/build.log" 2>&1 ||
        cp "$CARRY/prebuilt/_lgshm.so" daemon/linkguardd/ ||
        die "cannot build the daemon's shm library (see $WORK/build.log) and no .gpu/prebuilt"
fi

LG_GPU_PLUGIN="built here"
prebuilt="libnccl-net-linkguard.so lg_shm_dump"
[ $dry = 1 ] && prebuilt="$prebuilt lg_nccl_driver libnccl-net-lgtcp.so"
if ! command -v make >/dev/null; then
    echo "no make on this machine" >>"$WORK/build.log"
    false
else
    # shellcheck disable=SC2046 # one word per target
    make -s -C plugin -j"$(nproc)" $(printf 'build/%s ' $prebuilt) >>"$WORK/build.log" 2>&1
fi || {
    [ -d "$CARRY/prebuilt" ] || die "the plugin build failed: $(tail -3 "$WORK/build.log")"
    mkdir -p plugin/build
    for f in $prebuilt; do cp "$CARRY/prebuilt/$f" plugin/build/ || die "no .gpu/prebuilt/$f"; done
    LG_GPU_PLUGIN="prebuilt (.gpu/prebuilt; $(tail -1 "$WORK/build.log"))"
}

imports='import pyroute2, grpc, click, prometheus_client, linkguardd.api'
LG_GPU_WHEELS="present"
if ! "$PY" -c "$imports" 2>/dev/null; then
    ls "$CARRY"/wheels/*.whl >/dev/null 2>&1 ||
        die "the daemon cannot import its packages and there is no .gpu/wheels: $("$PY" \
            -c "$imports" 2>&1 | tail -1)"
    site=/tmp/lg-gpu-site
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" "$CARRY"/wheels/*.whl || die "pip install of .gpu/wheels failed"
    export PYTHONPATH="$site:$PYTHONPATH"
    "$PY" -c "$imports" || die "the daemon's imports fail even with .gpu/wheels"
    LG_GPU_WHEELS="carried (.gpu/wheels)"
fi

LG_GPU_TOOLS="system"
if ! command -v ip >/dev/null; then
    [ -x "$CARRY/tools/libexec/ip" ] || die "no ip (iproute2) here and no .gpu/tools"
    tools=/tmp/lg-gpu-tools
    mkdir -p "$tools/bin" "$tools/lib"
    for lib in "$CARRY"/tools/lib/*; do  # only what this machine lacks: ranks inherit the path
        ldconfig -p | grep -q "^[[:space:]]$(basename "$lib") " || cp "$lib" "$tools/lib/"
    done
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
        "$tools" "$CARRY/tools/libexec/ip" >"$tools/bin/ip"
    chmod +x "$tools/bin/ip"
    export PATH="$tools/bin:$PATH"
    ip -V >/dev/null || die "the carried ip does not run here"
    LG_GPU_TOOLS="carried ip (.gpu/tools)"
fi
command -v linkguardd >/dev/null || export PATH="$REPO/tests/gpu/bin:$PATH" LG_GPU_PYTHON="$PY"

if [ $dry = 0 ]; then
    RANK_PY=${LG_GPU_RANK_PYTHON:-$PY}
    nvidia-smi -L 2>/dev/null || say "nvidia-smi is not available"
    env -u PYTHONPATH "$RANK_PY" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' ||
        die "$RANK_PY has no torch with a CUDA device (set LG_GPU_RANK_PYTHON)"
fi

LG_GPU_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || cat "$CARRY/COMMIT" 2>/dev/null ||
                echo unknown)
export LG_GPU_COMMIT LG_GPU_PLUGIN LG_GPU_WHEELS LG_GPU_TOOLS
say "commit $LG_GPU_COMMIT; plugin $LG_GPU_PLUGIN; wheels $LG_GPU_WHEELS; tools $LG_GPU_TOOLS"

# --- the check --------------------------------------------------------------------------------
# In the background so that a SIGTERM to this script reaches the harness at once (timeout
# forwards it), which then tears its lab down and writes its result before exiting.
PYTHONUNBUFFERED=1 timeout -k 20 "$LIMIT" "$PY" tests/gpu/nccl_check.py --out "$OUT" \
    --work "$WORK" --prefix "$PREFIX" --timeout-s $((LIMIT - 30)) "$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM INT
wait "$child"
rc=$?
while kill -0 "$child" 2>/dev/null; do  # a signal ended the wait, not the harness
    wait "$child"
    rc=$?
done
exit "$rc"
