#!/usr/bin/env bash
# Installs the Debian packages listed in scripts/host-packages.txt that are missing.
# Runs `apt-get update` only when something has to be installed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mapfile -t wanted < <(sed -e 's/#.*//' -e '/^\s*$/d' "$here/host-packages.txt" | awk '{print $1}')
missing=()
for p in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "install-host-packages: missing Debian packages: ${missing[*]} (run as root or install them)" >&2
    exit 2
fi
echo "install-host-packages: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
