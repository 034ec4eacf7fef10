#!/usr/bin/env bash
# The demo: one multiattach volume shared by two running KVM guests, read-write and read-only,
# through virtdriver's LibvirtVolumeDriver (sets the host up on a fresh Debian 12 machine first).
# Extra arguments go to the demo (e.g. --uri qemu:///system).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
./scripts/setup-host.sh
exec .venv/bin/python -m testhosts.demo "$@"
