#!/usr/bin/env bash
# Installs linkguard: what `make install` runs (PREFIX and DESTDIR come from make).
#
#   PREFIX=/usr/local DESTDIR= scripts/install.sh [--nccl-conf [--nccl-net-strict]]
#                                                 [--no-python] [--no-plugin]
#
# Where things go (DESTDIR is prepended to every path, for staging a package):
#   $PREFIX/lib/linkguard/venv         the Python package and its dependencies, in a private venv:
#                                      Debian's python3 is "externally managed" (PEP 668) and the
#                                      pinned pyroute2/grpcio are not Debian's versions, so they
#                                      stay out of the system's site-packages.
#   $PREFIX/bin/{linkguardd,linkguard-cli}   symlinks into the venv
#   $PREFIX/bin/linkguard-slurm-{healthcheck,taskprolog}   Slurm's HealthCheckProgram and
#                                      TaskProlog (docs/slurm.md), symlinks into the venv
#   $PREFIX/lib/libnccl-net-linkguard.so     the NCCL plugin; NCCL_NET_PLUGIN=linkguard makes
#                                      NCCL dlopen("libnccl-net-linkguard.so") through ld.so
#   $UNITDIR/linkguardd.service        $PREFIX/lib/systemd/system for /usr and /usr/local (on
#                                      systemd's search path), else /etc/systemd/system
#   $SYSUSERSDIR/linkguard.conf        the linkguard and linkguard-admin groups
#   $SYSCONFDIR/linkguard/linkguard.toml(.example), $SYSCONFDIR/default/linkguardd,
#   $SYSCONFDIR/linkguard/slurm.toml(.example)   never overwritten once present
#   $PREFIX/share/linkguard/nhc/linkguard.nhc    the check for LBNL NHC (docs/slurm.md)
#   $PREFIX/share/doc/linkguard/       docs/*.md (operators.md links the others), README.md
#   $PREFIX/share/{bash-completion,zsh,fish}/...   linkguard-cli's shell completion
#   $PREFIX/share/linkguard/           prometheus/linkguard.rules.yml (alerts) and
#                                      grafana/linkguard.json (dashboard), for the fleet's servers
# Opt-in: --nccl-conf appends NCCL_NET_PLUGIN=linkguard to $SYSCONFDIR/nccl.conf, so every NCCL
# job on the host loads the plugin; --nccl-net-strict adds NCCL_NET=linkguard, so a job fails
# instead of silently falling back to NCCL's own transport when the plugin cannot load.
# Environment: PYTHON (python3), UNITDIR, SYSUSERSDIR, SYSCONFDIR (/etc), PLUGIN (the .so);
# pip honours PIP_INDEX_URL / PIP_FIND_LINKS; run from an unpacked `make wheelhouse` the script
# installs offline from its wheels/.
set -euo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
PYTHON=${PYTHON:-python3}
SYSCONFDIR=${SYSCONFDIR:-/etc}
PLUGIN=${PLUGIN:-$SRC/plugin/build/libnccl-net-linkguard.so}
case "$PREFIX" in
    /usr | /usr/local) default_lib=$PREFIX/lib ;;
    *) default_lib="" ;;
esac
UNITDIR=${UNITDIR:-${default_lib:+$default_lib/systemd/system}}
UNITDIR=${UNITDIR:-$SYSCONFDIR/systemd/system}
SYSUSERSDIR=${SYSUSERSDIR:-${default_lib:+$default_lib/sysusers.d}}
SYSUSERSDIR=${SYSUSERSDIR:-$SYSCONFDIR/sysusers.d}

python=1 plugin=1 nccl_conf=0 nccl_strict=0
usage() { sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --nccl-conf) nccl_conf=1 ;;
        --nccl-net-strict) nccl_conf=1 nccl_strict=1 ;;
        --no-python) python=0 ;;
        --no-plugin) plugin=0 ;;
        -h | --help) usage 0 ;;
        *) echo "install.sh: unknown argument '$1'" >&2; usage 2 >&2 ;;
    esac
    shift
done
case "$PREFIX" in /*) ;; *) echo "install.sh: PREFIX must be absolute, got '$PREFIX'" >&2; exit 2 ;; esac

die() { echo "install.sh: $*" >&2; exit 1; }
say() { echo "  $*"; }
put() { # put MODE SOURCE TARGET: install one file, creating its directory
    install -D -m "$1" "$2" "$DESTDIR$3"
    say "$3"
}
put_once() { # like put, but keep an administrator's existing file
    if [ -e "$DESTDIR$3" ]; then say "$3 (kept: already present)"; else put "$@"; fi
}

venv=$PREFIX/lib/linkguard/venv
echo "installing linkguard into ${DESTDIR}${PREFIX}"

# --- Python package -------------------------------------------------------------------------------
if [ "$python" = 1 ] && [ -d "$SRC/wheels" ]; then
    # a wheelhouse (make wheelhouse): offline, from its own wheels only
    "$PYTHON" -m venv --clear "$DESTDIR$venv"
    "$DESTDIR$venv/bin/python" -m pip install --quiet --no-cache-dir --no-index \
        --find-links "$SRC/wheels" -c "$SRC/constraints.txt" linkguard
elif [ "$python" = 1 ]; then
    [ -f "$SRC/daemon/linkguard/v1/linkguard_pb2.py" ] \
        || die "gRPC stubs missing (daemon/linkguard/v1): run 'make proto' first"
    "$PYTHON" -m venv --clear "$DESTDIR$venv"
    "$DESTDIR$venv/bin/python" -m pip install --quiet --no-cache-dir --upgrade pip
    "$DESTDIR$venv/bin/python" -m pip install --quiet --no-cache-dir \
        -c "$SRC/constraints.txt" "$SRC"
fi
if [ "$python" = 1 ]; then
    "$SRC/scripts/link-pyverbs.sh" "$DESTDIR$venv/bin/python"
    if [ -n "$DESTDIR" ]; then
        # scripts and pyvenv.cfg name the staging path; the venv will live at $venv
        grep -rlF "$DESTDIR$venv" "$DESTDIR$venv/bin" "$DESTDIR$venv/pyvenv.cfg" 2>/dev/null \
            | while read -r f; do sed -i "s#$DESTDIR$venv#$venv#g" "$f"; done
    fi
    say "$venv"
fi
# --- shell completion (click's): linkguard-cli completes commands, options and, from the
# running daemon, NIC names. Generated by the CLI just installed (or, with --no-python, the
# build's own in .venv); the scripts call linkguard-cli at each Tab press, so they never go stale.
bin=$DESTDIR$venv/bin  # its scripts' #! names the final path: run them with its python
[ -x "$bin/python" ] || bin=$SRC/.venv/bin
if [ -x "$bin/python" ] && [ -f "$bin/linkguard-cli" ]; then
    for shell in bash:share/bash-completion/completions/linkguard-cli \
                 zsh:share/zsh/site-functions/_linkguard-cli \
                 fish:share/fish/vendor_completions.d/linkguard-cli.fish; do
        mkdir -p "$(dirname "$DESTDIR$PREFIX/${shell#*:}")"
        _LINKGUARD_CLI_COMPLETE=${shell%%:*}_source "$bin/python" "$bin/linkguard-cli" \
            > "$DESTDIR$PREFIX/${shell#*:}"
        say "$PREFIX/${shell#*:}"
    done
else
    echo "install.sh: no linkguard-cli to generate shell completion with (run 'make build')" >&2
fi
for tool in linkguardd linkguard-cli linkguard-slurm-healthcheck linkguard-slurm-taskprolog; do
    mkdir -p "$DESTDIR$PREFIX/bin"
    ln -sfn "../lib/linkguard/venv/bin/$tool" "$DESTDIR$PREFIX/bin/$tool"
    say "$PREFIX/bin/$tool -> ../lib/linkguard/venv/bin/$tool"
done

# --- NCCL plugin ----------------------------------------------------------------------------------
if [ "$plugin" = 1 ]; then
    [ -f "$PLUGIN" ] || die "plugin not built ($PLUGIN): run 'make plugin', or pass --no-plugin"
    put 0755 "$PLUGIN" "$PREFIX/lib/libnccl-net-linkguard.so"
    if [ -z "$DESTDIR" ] && [ "$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then
        ldconfig
    fi
fi

# --- systemd, configuration, docs -----------------------------------------------------------------
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -e "s#^ExecStart=.*#ExecStart=$PREFIX/bin/linkguardd#" \
    -e "s#^Documentation=.*#Documentation=file://$PREFIX/share/doc/linkguard/operators.md#" \
    "$SRC/systemd/linkguardd.service" > "$tmp/linkguardd.service"
put 0644 "$tmp/linkguardd.service" "$UNITDIR/linkguardd.service"
put 0644 "$SRC/systemd/linkguard.sysusers" "$SYSUSERSDIR/linkguard.conf"
put 0644 "$SRC/systemd/linkguard.toml" "$SYSCONFDIR/linkguard/linkguard.toml.example"
put_once 0644 "$SRC/systemd/linkguard.toml" "$SYSCONFDIR/linkguard/linkguard.toml"
put_once 0644 "$SRC/systemd/linkguardd.default" "$SYSCONFDIR/default/linkguardd"
put 0644 "$SRC/slurm/linkguard-slurm.toml" "$SYSCONFDIR/linkguard/slurm.toml.example"
put_once 0644 "$SRC/slurm/linkguard-slurm.toml" "$SYSCONFDIR/linkguard/slurm.toml"
put 0644 "$SRC/slurm/nhc/linkguard.nhc" "$PREFIX/share/linkguard/nhc/linkguard.nhc"
for doc in "$SRC"/docs/*.md; do # every page: operators.md links the others
    put 0644 "$doc" "$PREFIX/share/doc/linkguard/${doc##*/}"
done
put 0644 "$SRC/README.md" "$PREFIX/share/doc/linkguard/README.md"
put 0644 "$SRC/fleet/prometheus/linkguard.rules.yml" "$PREFIX/share/linkguard/prometheus/linkguard.rules.yml"
put 0644 "$SRC/fleet/grafana/linkguard.json" "$PREFIX/share/linkguard/grafana/linkguard.json"

# --- opt-in: every NCCL job on the host loads the plugin -----------------------------------------
nccl_line() { # nccl_line KEY VALUE: add KEY=VALUE to nccl.conf unless KEY is already set
    # NCCL's parser (setEnvFile) takes everything after the first '=' as the value, trims
    # nothing, and lets the first line for a key win: so exact KEY=VALUE lines, and a comment
    # line of its own (without '=').
    local conf=$DESTDIR$SYSCONFDIR/nccl.conf current=""
    if [ -f "$conf" ]; then current=$(sed -n "s/^$1=//p" "$conf" | head -1); fi
    if [ -z "$current" ]; then
        mkdir -p "$(dirname "$conf")"
        printf '# added by linkguard install.sh\n%s=%s\n' "$1" "$2" >> "$conf"
        say "$SYSCONFDIR/nccl.conf: $1=$2"
    elif [ "$current" = "$2" ]; then
        say "$SYSCONFDIR/nccl.conf: $1=$2 (already set)"
    else
        echo "install.sh: $SYSCONFDIR/nccl.conf already sets $1=$current; left unchanged" >&2
    fi
}
if [ "$nccl_conf" = 1 ]; then
    nccl_line NCCL_NET_PLUGIN linkguard
    [ "$nccl_strict" = 0 ] || nccl_line NCCL_NET linkguard
fi

cat <<EOF
done. Next (as root):
  systemd-sysusers                 # creates groups linkguard and linkguard-admin
  systemctl daemon-reload && systemctl enable --now linkguardd
  linkguard-cli status
EOF
if [ "$nccl_conf" = 0 ]; then
    cat <<EOF
To make every NCCL job on this host use the plugin, add to $SYSCONFDIR/nccl.conf (or rerun with
--nccl-conf):  NCCL_NET_PLUGIN=linkguard   (and NCCL_NET=linkguard to forbid silent fallback)
EOF
fi
case "$PREFIX" in
    /usr | /usr/local) ;;
    *) echo "NCCL finds the plugin through ld.so: add $PREFIX/lib to /etc/ld.so.conf.d/ and run ldconfig." ;;
esac
