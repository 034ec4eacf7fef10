#!/usr/bin/env bash
# Build (or reuse) the wheelhouse the nested VM installs the project from: it has no network.
#
#   testhosts/nested/build-wheelhouse.sh REPO_ROOT      # prints the wheelhouse directory
#
# Every wheel of the project's dependencies with its [test] extra, plus pip's build backend
# (setuptools, wheel) to install the project itself offline, and prebuilt/venv.img: the VM's
# venv of them, made here. Built with this host's Python 3.11,
# which is Debian 12's, so the wheels fit the VM; libvirt-python is compiled here against this
# host's libvirt 9.0 headers, the libvirt the VM has. Cached in
# /var/tmp/virtdriver-nested/wheels-<KEY>, KEY a hash of pyproject.toml, this script, cache.sh
# and the Python version (cache.sh).
set -euo pipefail
repo=${1:?usage: build-wheelhouse.sh REPO_ROOT}
log() { printf 'build-wheelhouse: %s\n' "$*" >&2; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pyver=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# shellcheck source=testhosts/nested/cache.sh
source "$here/cache.sh"
nested_cache_enter wheels wheels.lock "$repo/pyproject.toml" "${BASH_SOURCE[0]}" -- "python=$pyver"

# What compiling libvirt-python needs (setup-host.sh installs the libvirt ones already).
need=()
for p in python3-venv python3-dev gcc pkg-config libvirt-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need+=("$p")
done
if ((${#need[@]})); then
    log "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

work="$cache/wheels-$key.$$"
rm -rf "$work"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/wheels"
started=$SECONDS
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --upgrade pip >"$work/pip.log" 2>&1 || { cat "$work/pip.log" >&2; exit 1; }
log "pip wheel '.[test]' (compiles libvirt-python against this host's libvirt headers)"
if ! "$work/venv/bin/pip" wheel -q --wheel-dir "$work/wheels" "${repo}[test]" setuptools wheel pip \
        >>"$work/pip.log" 2>&1; then
    cat "$work/pip.log" >&2
    exit 1
fi
rm -f "$work"/wheels/virtdriver-*.whl   # the project itself comes from the working tree
n=$(ls "$work/wheels" | wc -l)
# The VM's venv, made here at the path it has there (/opt/vd/venv, the project editable from
# /opt/vd/project) in a private mount namespace with Debian's Python (the VM's), byte-compiled,
# as an ext4 image the VM mounts read-only (prebuilt/venv.img, a disk of its own): installing
# it under TCG took 172 s a boot, and unpacking 208 MB of it from the payload 133 s.
log "the VM's venv, made at /opt/vd/venv in a private mount namespace"
mkdir -p "$work/wheels/prebuilt"
unshare --mount --propagation private bash -euo pipefail -c '
    work=$1 repo=$2
    mount -t tmpfs tmpfs /opt
    mkdir -p /opt/vd/project /opt/vd/venv
    mount --bind "$repo" /opt/vd/project
    /usr/bin/python3 -m venv /opt/vd/venv
    /opt/vd/venv/bin/pip install -q --no-index --find-links "$work/wheels" \
        -e "/opt/vd/project[test]" >>"$work/pip.log" 2>&1 || { cat "$work/pip.log" >&2; exit 1; }
    # what only the host uses (types, style, installing): 85 of 208 MB
    /opt/vd/venv/bin/python -m pip uninstall -q -y mypy ruff pip >>"$work/pip.log" 2>&1
    size=$(( $(du -sm /opt/vd/venv | cut -f1) * 3 / 2 + 32 ))M
    mkfs.ext4 -q -F -L vdvenv -d /opt/vd/venv "$work/wheels/prebuilt/venv.img" "$size" >&2
' venv "$work" "$repo"
echo "wheelhouse $((SECONDS - started))" >"$work/wheels/timings.txt"
nested_cache_publish "$work/wheels"
log "$n wheels in $dest ($((SECONDS - started)) s)"
echo "$dest"
