#!/usr/bin/env bash
# nova's own libvirt volume-driver tests (nova 34.0.0, nova/tests/unit/virt/libvirt/volume, run
# under unittest) against virtdriver's adapters (virtdriver.nova); then a compute service started
# by nova's own functional harness from the documented line `compute_driver =
# virtdriver.nova.LibvirtDriver` (tests/nova/loader_cases.py: nova's loader, nova's API); then the
# real-guest test of virtdriver.nova.LibvirtDriver (tests/nova/test_nova_guests.py).
#
# The venv lives outside the repository, cached by nova version: the first run builds it (a few
# minutes: nova's whole dependency set, and etc/nova from nova's sdist, which nova's functional
# harness reads), later runs reuse it and only reinstall virtdriver from this checkout -- as a
# wheel, the way `pip install virtdriver[nova]` installs it: nova's loader finds the driver through
# the nova.virt.virtdriver package that the wheel puts into nova's own nova/virt/, which an
# editable install cannot do.
#
# Usage: scripts/nova-suite.sh [--suite-only|--guests-only]
# Env:   NOVA_VERSION (34.0.0), NOVA_SUITE_VENV (/var/tmp/virtdriver-nova-$NOVA_VERSION),
#        NOVA_SUITE_MIN_PASSED (120: fewer passed tests fails the run), PYTHON (python3)
# Prints nova's result as its last line of the first part: "N passed, M failed".
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

part=all
case "${1:-}" in
    --suite-only) part=suite ;;
    --guests-only) part=guests ;;
    "") ;;
    *) echo "usage: $0 [--suite-only|--guests-only]" >&2; exit 2 ;;
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
if [ "$part" != guests ]; then
    # From outside the checkout, so the editable install (not a stray path) is what is tested.
    (cd /tmp && "$VENV/bin/python" "$here/tests/nova/nova_suite.py" --min-passed "$MIN_PASSED" \
        2>"${NOVA_SUITE_LOG:-/tmp/virtdriver-nova-suite.log}") || status=1
fi
if [ "$part" != suite ]; then
    echo "nova-suite: a compute service from nova's loader and API (tests/nova/loader_cases.py)"
    (cd /tmp && "$VENV/bin/python" "$here/tests/nova/run_cases.py" loader_cases \
        2>>"${NOVA_SUITE_LOG:-/tmp/virtdriver-nova-suite.log}") || status=1
    (cd "$here" && "$VENV/bin/python" -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning tests/nova) || status=1
fi
exit $status
