#!/usr/bin/env bash
# The whole test suite, from a fresh machine: host setup (libvirt, QEMU, .venv), the storage
# test backends on 127.0.0.1 (tgt, qemu-nbd, Ceph, Gluster) and a real Cinder on that Ceph (all
# torn down afterwards if this run started them), then pytest.
# Then the benchmark report's quick mode (that it runs; its figures are not checked), and nova's
# own libvirt volume tests against virtdriver.nova and its real-guest test
# (scripts/nova-suite.sh; its nova venv is cached under /var/tmp; VIRTDRIVER_SKIP_NOVA=1 skips it).
# The in-guest tests build their Linux test guest (testhosts/linuxguest) from the pytest fixture,
# cached under /var/tmp/virtdriver-linuxguest.
# Then tests/lsm inside the nested test host, booted once with SELinux enforcing and once with
# AppArmor (scripts/test-nested.sh; image cached under /var/tmp/virtdriver-nested, about 15 min
# on a fresh machine: testhosts/README.md; VIRTDRIVER_SKIP_NESTED=1 skips it for quick local
# runs, CI runs it). Extra arguments go to the host's pytest.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
./scripts/setup-host.sh
started_backends=0
if ! ./scripts/test-backends.sh status >/dev/null 2>&1; then
    started_backends=1
    ./scripts/test-backends.sh up || echo "test.sh: some storage backends did not start" >&2
fi
# a real Cinder on the test Ceph (scripts/test-cinder.sh; its venv is cached under /var/tmp):
# 6.5-10.6 s to start (db sync + one process), about 1.5 minutes more the first time (its venv)
started_cinder=0
if ! ./scripts/test-cinder.sh status >/dev/null 2>&1; then
    started_cinder=1
    ./scripts/test-cinder.sh up || echo "test.sh: Cinder did not start" >&2
fi
cleanup() {
    if [ "$started_cinder" = 1 ]; then ./scripts/test-cinder.sh down || true; fi
    if [ "$started_backends" = 1 ]; then ./scripts/test-backends.sh down || true; fi
}
trap cleanup EXIT
status=0
.venv/bin/python -m pytest "$@" || status=$?
# The benchmark report in its quick mode (about half a minute, into a temporary directory): it
# must keep running; benchmarks/report.py without --quick makes the committed report.
quick=$(mktemp -d)
if ! .venv/bin/python benchmarks/report.py --quick --out "$quick" >"$quick/log" 2>&1; then
    echo "test.sh: benchmarks/report.py --quick failed:" >&2
    tail -20 "$quick/log" >&2
    status=1
fi
rm -rf "$quick"
if [ "${VIRTDRIVER_SKIP_NOVA:-0}" != 1 ]; then
    ./scripts/nova-suite.sh || status=1
fi
if [ "${VIRTDRIVER_SKIP_NESTED:-0}" != 1 ]; then
    # One VM at a time (2 cores): SELinux, then AppArmor; the image is built once for both.
    ./scripts/test-nested.sh --lsm selinux || status=1
    ./scripts/test-nested.sh --lsm apparmor || status=1
fi
exit $status
