#!/usr/bin/env bash
# Makes Debian's python3-pyverbs (rdma-core; scripts/host-packages.txt) importable from a venv,
# for verbs async events. Usage: scripts/link-pyverbs.sh VENV_PYTHON
#
# One symlink of that one package into the venv's site-packages. Not --system-site-packages and
# not a .pth onto dist-packages: either would put every Debian Python package (python3-protobuf,
# python3-grpcio, ...) on the path, next to or in front of the pinned versions in
# constraints.txt. pyverbs' extension modules are built for CPython 3.11, the venv's version.
# Never from PyPI: its sdist does not build against Debian 12's rdma-core.
set -euo pipefail
python=${1:?usage: link-pyverbs.sh VENV_PYTHON}
system=${PYVERBS_DIR:-/usr/lib/python3/dist-packages/pyverbs}
if [ ! -d "$system" ]; then
    echo "link-pyverbs: $system not found (apt-get install python3-pyverbs): RDMA ports are" \
         "then read from sysfs only, without verbs events" >&2
    exit 0
fi
site=$("$python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
ln -sfn "$system" "$site/pyverbs"
