#!/usr/bin/env bash
# The whole test suite, from a fresh machine: host setup (libvirt, QEMU, .venv), the storage
# test backends on 127.0.0.1 (tgt, qemu-nbd, Ceph, Gluster; torn down afterwards), then pytest.
# Extra arguments go to pytest.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
./scripts/setup-host.sh
started_backends=0
if ! ./scripts/test-backends.sh status >/dev/null 2>&1; then
    started_backends=1
    ./scripts/test-backends.sh up || echo "test.sh: some storage backends did not start" >&2
fi
cleanup() { if [ "$started_backends" = 1 ]; then ./scripts/test-backends.sh down || true; fi; }
trap cleanup EXIT
.venv/bin/python -m pytest "$@"
