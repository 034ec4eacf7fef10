#!/usr/bin/env bash
# Builds the control plane's venv: testhosts/openstack/build-venv.sh DEST
# (run by scripts/test-openstack.sh; this file and requirements.txt are the cache key).
# Built in DEST.build and renamed when complete. Debian's rados/rbd extension modules are linked
# in for Cinder's RBD driver (this Python is not Debian's; they match its ABI, 3.11).
set -Eeuo pipefail
trap 'log "failed at line $LINENO: $BASH_COMMAND"' ERR
dest=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { printf 'test-openstack: %s\n' "$*" >&2; }
rm -rf "$dest.build"
python3 -m venv "$dest.build" || exit 1
py=$dest.build/bin/python
# pip's own status is not trusted alone: the imports below say whether it worked
quiet() { grep -v -e '^WARNING: Location' -e '^$' >&2 || true; }
"$py" -m pip install -q --upgrade pip 2>&1 | quiet
"$py" -m pip install -q -r "$here/requirements.txt" 2>&1 | quiet
export PYTHONWARNINGS=ignore   # eventlet's deprecation banner on every import of cinder
"$py" -c 'import nova, keystone, placement, glance, cinder, neutron, libvirt' ||
    { log "pip install -r requirements.txt failed"; exit 1; }
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
abi=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("SOABI"))')
for m in rados rbd; do
    so=$(ls /usr/lib/python3/dist-packages/$m.cpython-*-x86_64-linux-gnu.so 2>/dev/null | head -1 || true)
    [ -n "$so" ] || { log "no $m extension module (apt-get install python3-$m)"; exit 1; }
    ln -sf "$so" "$site/$m.$abi.so"
done
"$py" -c 'import rados, rbd' || { log "rados/rbd do not load in the venv"; exit 1; }
check=$("$py" -m pip check 2>&1) || { printf '%s\n' "$check" >&2; log "pip check failed"; exit 1; }
# the scripts' #! lines name the build path: point them at the final one
scripts=$(find "$dest.build/bin" -maxdepth 1 -type f -exec grep -lI "^#!$dest.build/bin/" {} + || true)
[ -z "$scripts" ] || sed -i "1s|^#!$dest.build/bin/|#!$dest/bin/|" $scripts
touch "$dest.build/.complete" && rm -rf "$dest" && mv "$dest.build" "$dest"
