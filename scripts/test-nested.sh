#!/usr/bin/env bash
# Run tests inside the nested test host: a Debian 12 VM (QEMU TCG) with SELinux enforcing or
# AppArmor, libvirt with that security driver, and kernel iSCSI/NVMe initiators.
#
#   scripts/test-nested.sh --lsm selinux|apparmor [--results DIR] [--timeout S] [--] [pytest args...]
#
# Without pytest args it runs tests/nested (the tests marked lsm_selinux or lsm_apparmor for that
# LSM, and kernel_initiator). The image is built once and cached under /var/tmp/virtdriver-nested
# (see testhosts/README.md for what it holds and what each step costs). Prints the LSM's mode and
# pytest's summary line; exits with pytest's exit status inside the VM (non-zero when the VM
# produced no results or timed out).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec "$here/testhosts/nested/run.sh" "$@"
