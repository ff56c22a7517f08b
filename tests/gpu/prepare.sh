#!/usr/bin/env bash
# Makes .gpu/, the one git-ignored folder a GPU-machine run carries (`make gpu-prep`; see
# CONTRIBUTING.md, "GPU check"). The device machine has no network and starts bare:
#   wheels/    the daemon's Python packages at this venv's versions (the stubs' protobuf must
#              match), for the device's CPython 3.12 on x86-64 (pip download, no install)
#   stubs/     the generated gRPC stubs (git-ignored, so absent from the tree that travels)
#   prebuilt/  the plugin, lg_shm_dump, the daemon's shm library (and the dry run's driver and
#              lgtcp) built here: used only when the device cannot build them
#   tools/     iproute2's ip and the libraries it links beyond glibc: used only when the
#              device image has no ip
#   COMMIT     the commit these were made from
# run_nccl_check.sh uses each part only when the device lacks it. Needs pip's registry.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
PY=${PYTHON:-.venv/bin/python}
DEST=.gpu
LIMIT_MIB=40  # the tree that travels is limited to 64 MiB in all

rm -rf "$DEST"
mkdir -p "$DEST"/{wheels,stubs,prebuilt,tools/libexec,tools/lib}

specs=()
for pkg in pyroute2 grpcio typing-extensions protobuf prometheus-client click; do
    specs+=("$pkg==$("$PY" -c "import importlib.metadata as m; print(m.version('$pkg'))")")
done
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${platforms[@]}" -d "$DEST/wheels" "${specs[@]}"

cp daemon/linkguard/v1/linkguard_pb2.py daemon/linkguard/v1/linkguard_pb2_grpc.py "$DEST/stubs/"

cp plugin/build/{libnccl-net-linkguard.so,lg_shm_dump,lg_nccl_driver,libnccl-net-lgtcp.so} \
    "$DEST/prebuilt/"
cp daemon/linkguardd/_lgshm.*so "$DEST/prebuilt/_lgshm.so"

ip_bin=$(readlink -f "$(command -v ip)")
cp "$ip_bin" "$DEST/tools/libexec/ip"
# glibc's own libraries stay behind: the device's glibc is the one to use.
ldd "$ip_bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
    grep -Ev '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*)\.so' |
    xargs -r cp -L -t "$DEST/tools/lib/"

git rev-parse --short HEAD >"$DEST/COMMIT"

mib=$(( $(du -sb "$DEST" | cut -f1) / 1048576 ))
[ "$mib" -le "$LIMIT_MIB" ] || { echo "prepare: $DEST is $mib MiB (> $LIMIT_MIB)"; exit 1; }
echo "prepare: $DEST ready ($mib MiB): $(ls "$DEST"/wheels | tr '\n' ' ')"
echo "prepare: now run on the device (CONTRIBUTING.md, \"GPU check\"):"
echo "  command: bash tests/gpu/run_nccl_check.sh   carry: [\".gpu\"]   timeout_s: 480"
