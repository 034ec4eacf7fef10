#!/usr/bin/env bash
# Create (or reuse) a throw-away venv holding upstream OpenStack Nova 34.x, used only by
# benchmarks/nova_render.py to compare Nova's own <disk> rendering with virtdriver's.
# Nova is NOT a dependency of virtdriver: the venv lives outside the repository.
#
# Usage: benchmarks/setup-nova-venv.sh [VENV_DIR]     (default /var/tmp/nova-venv)
# Env:   NOVA_SPEC (default "nova==34.*"), PYTHON (default python3)
# Idempotent: does nothing if VENV_DIR already has a matching nova that imports.
set -euo pipefail

VENV="${1:-${NOVA_VENV:-/var/tmp/nova-venv}}"
NOVA_SPEC="${NOVA_SPEC:-nova==34.*}"
PYTHON="${PYTHON:-python3}"

check() {
    "$VENV/bin/python" - "$NOVA_SPEC" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
from packaging.requirements import Requirement
import nova.virt.libvirt.config, nova.virt.libvirt.volume.iscsi  # noqa: F401
sys.exit(0 if Requirement(sys.argv[1]).specifier.contains(version("nova")) else 1)
EOF
}

if [ -x "$VENV/bin/python" ] && check; then
    echo "nova venv ready: $VENV (nova $("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("nova"))'))"
    exit 0
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
# A full install resolves in about a minute on PyPI; pulls nova's whole dependency set, which
# is what makes importing nova.conf / the libvirt volume drivers work unmodified.
"$VENV/bin/python" -m pip install --quiet "$NOVA_SPEC" packaging

if ! check; then
    echo "nova venv at $VENV does not import nova's libvirt volume drivers" >&2
    exit 1
fi
echo "nova venv ready: $VENV (nova $("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("nova"))'))"
