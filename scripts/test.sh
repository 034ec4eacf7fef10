#!/usr/bin/env bash
# The whole test suite, from a fresh machine: host setup, then pytest (extra args are passed on).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
./scripts/setup-host.sh
exec .venv/bin/python -m pytest "$@"
