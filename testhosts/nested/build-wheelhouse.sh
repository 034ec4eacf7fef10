#!/usr/bin/env bash
# Build (or reuse) the wheelhouse the nested VM installs the project from: it has no network.
#
#   testhosts/nested/build-wheelhouse.sh REPO_ROOT      # prints the wheelhouse directory
#
# Every wheel of the project's dependencies with its [test] extra, plus pip's build backend
# (setuptools, wheel) to install the project itself offline. Built with this host's Python 3.11,
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
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
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
echo "wheelhouse $((SECONDS - started))" >"$work/wheels/timings.txt"
nested_cache_publish "$work/wheels"
log "$n wheels in $dest ($((SECONDS - started)) s)"
echo "$dest"
