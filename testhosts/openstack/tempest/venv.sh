#!/usr/bin/env bash
# tempest's own venv, built once per input and cached: testhosts/openstack/tempest/venv.sh
#
# Prints the venv's path on stdout (everything else goes to stderr). The venv is
# /var/tmp/virtdriver-tempest-KEY, KEY = the first 12 hex digits of the sha256 of this script
# and constraints.txt (tempest==47.0.0, the release of nova 34's series, 2026.2, and every
# dependency pinned as resolved on the first build), so a change to either builds a new one.
# tempest only: cinder-tempest-plugin is not installed (README.md, "Plugins").
# Built in place with a `.complete` marker written last, under a lock (two runs at once build
# once); a venv without the marker is removed and built again.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TEMPEST_VERSION=47.0.0
key=$(cat "${BASH_SOURCE[0]}" "$here/constraints.txt" | sha256sum | cut -c1-12)
VENV=${VD_TEMPEST_VENV:-/var/tmp/virtdriver-tempest-$key}
log() { printf 'tempest-venv: %s\n' "$*" >&2; }

if [ -e "$VENV/.complete" ]; then echo "$VENV"; exit 0; fi
exec 9>"$VENV.lock"
flock 9
if [ -e "$VENV/.complete" ]; then echo "$VENV"; exit 0; fi
t0=$(date +%s)
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check -c "$here/constraints.txt" \
    "tempest==$TEMPEST_VERSION" 2>&1 | grep -v '^WARNING: Location' >&2 || true
got=$("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("tempest"))' 2>/dev/null) ||
    { log "pip install tempest==$TEMPEST_VERSION failed"; exit 1; }
[ "$got" = "$TEMPEST_VERSION" ] || { log "got tempest $got, wanted $TEMPEST_VERSION"; exit 1; }
"$VENV/bin/pip" check >&2 || { log "pip check failed in $VENV"; exit 1; }
"$VENV/bin/tempest" --version >/dev/null 2>&1 || { log "$VENV/bin/tempest does not run"; exit 1; }
touch "$VENV/.complete"
log "built $VENV (tempest $got) in $(( $(date +%s) - t0 ))s"
echo "$VENV"
