#!/usr/bin/env bash
# nova 34.0.0's own tests against virtdriver.nova, with nova's own libvirt driver as the baseline
# where a comparison means something (issue #21). In the nova venv, in this order:
#   1. nova's libvirt volume-driver tests (nova/tests/unit/virt/libvirt/volume) with the adapters
#      (tests/nova/nova_suite.py);
#   2. the volume tests of nova's nova/tests/unit/virt/libvirt/test_driver.py with
#      virtdriver.nova.LibvirtDriver in place of nova's LibvirtDriver, and with nova's (baseline)
#      (tests/nova/driver_suite.py);
#   3. nova's functional tests of volumes (four named modules, the regressions that attach,
#      detach, swap, extend, migrate or boot from volumes, the libvirt move/rebuild tests), every
#      compute service switched to virtdriver.nova.LibvirtDriver, and to nova's
#      libvirt.LibvirtDriver (baseline) (tests/nova/functional_suite.py);
#   4. virtdriver's own nova cases on nova's functional harness: a compute service started by
#      nova's loader from the documented line, bug 2048837's scenario through virtdriver
#      (tests/nova/run_cases.py loader_cases regression_cases);
#   5. pytest tests/nova: the adapters' disks against nova's drivers' field by field
#      (test_nova_fidelity.py), and nova's attach/detach on real guests (test_nova_guests.py).
# Each comparing step prints "N passed, M failed" per set for virtdriver and for nova, and fails
# when a test passing with nova's driver fails with virtdriver's without being a documented
# difference (tests/nova/functional_compare.py, docs/nova.md).
#
# The venv lives outside the repository, cached by nova version: the first run builds it (a few
# minutes: nova's whole dependency set, and etc/nova from nova's sdist, which nova's functional
# harness reads), later runs reuse it and only reinstall virtdriver from this checkout -- as a
# wheel, the way `pip install virtdriver[nova]` installs it: nova's loader finds the driver through
# the nova.virt.virtdriver package that the wheel puts into nova's own nova/virt/, which an
# editable install cannot do. The venv is shared by every checkout on the host: the suites run
# with this checkout first on PYTHONPATH, so another checkout's wheel installed meanwhile cannot
# stand in for this one (checked before the first step).
#
# Usage: scripts/nova-suite.sh [--suite-only|--guests-only|--functional-only]
# Env:   NOVA_VERSION (34.0.0), NOVA_SUITE_VENV (/var/tmp/virtdriver-nova-$NOVA_VERSION),
#        NOVA_SUITE_MIN_PASSED (120: fewer passed volume-driver tests fails the run),
#        NOVA_FUNCTIONAL_JOBS (6: processes at a time for step 3; its tests mostly wait),
#        NOVA_FUNCTIONAL_SETS (named,regressions,libvirt), PYTHON (python3)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NOVA_VERSION="${NOVA_VERSION:-34.0.0}"
VENV="${NOVA_SUITE_VENV:-/var/tmp/virtdriver-nova-$NOVA_VERSION}"
MIN_PASSED="${NOVA_SUITE_MIN_PASSED:-120}"
PYTHON="${PYTHON:-python3}"
# nova's test dependencies (its test-requirements, the part these tests import), and pytest for
# our real-guest test.
# openstack-placement: the placement fixture of nova's functional harness; SQLAlchemy 2.1 warns on
# nova 34's queries, which nova's test fixtures turn into errors.
TEST_DEPS=(oslotest ddt testtools fixtures requests-mock testscenarios wsgi-intercept gabbi
           osprofiler pytest openstack-placement "SQLAlchemy<2.1")
STAMP="$VENV/.virtdriver-nova-suite"
want="nova==$NOVA_VERSION ${TEST_DEPS[*]}"

FUNCTIONAL_JOBS="${NOVA_FUNCTIONAL_JOBS:-6}"
FUNCTIONAL_SETS="${NOVA_FUNCTIONAL_SETS:-named,regressions,libvirt}"
LOG="${NOVA_SUITE_LOG:-/tmp/virtdriver-nova-suite.log}"

part=all
case "${1:-}" in
    --suite-only) part=suite ;;
    --guests-only) part=guests ;;
    --functional-only) part=functional ;;
    "") ;;
    *) echo "usage: $0 [--suite-only|--guests-only|--functional-only]" >&2; exit 2 ;;
esac

if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
    echo "nova-suite: building $VENV (nova $NOVA_VERSION and its test dependencies)" >&2
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
    "$VENV/bin/python" -m pip install --quiet "nova==$NOVA_VERSION" "${TEST_DEPS[@]}" 2>&1 \
        | grep -v '^WARNING: Location' || true
    "$VENV/bin/python" -c "import nova.tests.unit.virt.libvirt.volume" || {
        echo "nova-suite: nova $NOVA_VERSION's tests do not import in $VENV" >&2; exit 1; }
    # nova's functional harness loads etc/nova/api-paste.ini beside the nova package; only the
    # sdist carries it.
    sdist=$(mktemp -d)
    "$VENV/bin/python" -m pip download --quiet --no-binary :all: --no-deps -d "$sdist" \
        "nova==$NOVA_VERSION" 2>&1 | grep -v '^WARNING: Location' || true
    site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    mkdir -p "$site/etc"
    tar xzf "$sdist/nova-$NOVA_VERSION.tar.gz" -C "$sdist" "nova-$NOVA_VERSION/etc/nova"
    rm -rf "$site/etc/nova" && cp -r "$sdist/nova-$NOVA_VERSION/etc/nova" "$site/etc/nova"
    rm -rf "$sdist"
    echo "$want" > "$STAMP"
fi
# virtdriver itself, built from this checkout as a wheel (its own dependencies: libvirt-python,
# lxml, os-brick; nova already brought most of them). A wheel of the same version is reinstalled.
"$VENV/bin/python" -m pip install --quiet "$here" 2>&1 | grep -v '^WARNING: Location' || true

status=0
: > "$LOG"
# This checkout first: the venv is shared, another checkout may have installed its wheel since.
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
step() {  # step NAME COMMAND...: run one step from /tmp, time it, keep its log
    local name=$1 started=$SECONDS rc=0
    shift
    echo "nova-suite: $name"
    (cd /tmp && "$@" 2>>"$LOG") || rc=1
    echo "nova-suite: $name took $((SECONDS - started)) s"
    return $rc
}
py="$VENV/bin/python"
t="$here/tests/nova"
imported=$(cd /tmp && "$py" -c 'import virtdriver; print(virtdriver.__file__)')
case "$imported" in
    "$here"/*) echo "nova-suite: virtdriver from $imported" ;;
    *) echo "nova-suite: virtdriver comes from $imported, not this checkout" >&2; exit 1 ;;
esac
if [ "$part" = all ] || [ "$part" = suite ]; then
    step "nova's volume-driver tests with the adapters" \
        "$py" "$t/nova_suite.py" --min-passed "$MIN_PASSED" || status=1
    step "nova's volume-driver tests with nova's own drivers (baseline)" \
        "$py" "$t/nova_suite.py" --nova-only || status=1
    step "test_driver.py's volume tests: virtdriver's LibvirtDriver | nova's" \
        "$py" "$t/driver_suite.py" || status=1
fi
if [ "$part" = all ] || [ "$part" = functional ]; then
    step "nova's functional tests of volumes: virtdriver | nova ($FUNCTIONAL_JOBS at a time)" \
        "$py" "$t/functional_suite.py" --jobs "$FUNCTIONAL_JOBS" --set "$FUNCTIONAL_SETS" \
        || status=1
fi
if [ "$part" = all ] || [ "$part" = guests ]; then
    step "virtdriver's cases on nova's harness (loader, bug 2048837)" \
        "$py" "$t/run_cases.py" loader_cases regression_cases || status=1
    step "fidelity to nova's drivers, nova on real guests (pytest tests/nova)" \
        bash -c "cd '$here' && '$py' -m pytest -q -p no:cacheprovider \
                 -W ignore::DeprecationWarning tests/nova" || status=1
fi
echo "nova-suite: logs in $LOG"
exit $status
