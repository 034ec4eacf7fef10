#!/usr/bin/env bash
# The whole test suite, from a fresh machine, or one of its layers (README.md: "Test layers").
# A test's folder says what it needs: tests/fast (nothing), tests/host and tests/inguest (a real
# libvirtd, guests, backends), tests/nova (nova's venv), tests/nested (the nested test host).
#
#   ./scripts/test.sh                 everything (CI: .ci/run), the layers below in this order
#   ./scripts/test.sh --fast          tests/fast: no libvirtd, no guest, no backend (model, render,
#                                     policy, reader, CLI input handling), mypy and ruff; sets up
#                                     only .venv if it is missing
#   ./scripts/test.sh --hypervisor    host setup (libvirt, QEMU, .venv), the storage test backends
#                                     on 127.0.0.1 (tgt, qemu-nbd, Ceph, Gluster) and a real Cinder
#                                     on that Ceph (torn down afterwards if this run started them),
#                                     then tests/host and tests/inguest (real libvirtd, guests; the
#                                     in-guest Linux guest is cached under
#                                     /var/tmp/virtdriver-linuxguest), then the benchmark report's
#                                     quick mode (that it runs; figures unchecked)
#   ./scripts/test.sh --nova          nova 34's own tests through virtdriver.nova beside nova's own
#                                     driver: volume-driver tests, test_driver.py's volume tests,
#                                     functional tests of volumes, then tests/nova (fidelity, real
#                                     guests) (scripts/nova-suite.sh: about 8-10 min on 2 cores;
#                                     its venv cached under /var/tmp)
#   ./scripts/test.sh --stack debian13
#                                     the second host stack (testhosts/debian13: Debian 13's
#                                     libvirt 11.3, QEMU 10.0, Python 3.13 in a private mount
#                                     namespace beside this host's daemons, its tree cached under
#                                     /var/tmp/virtdriver-debian13): tests/fast on 3.13, then the
#                                     host tests in STACK_TESTS below and tests/inguest there,
#                                     against this host's storage backends
#   ./scripts/test.sh --stack debian13-split
#                                     the same stack with libvirt's split daemons (virtqemud,
#                                     virtsecretd, virtlogd; no libvirtd, no libvirt-sock), built
#                                     from Debian's libvirt 11.3 source once and cached beside the
#                                     tree: the host tests in SPLIT_TESTS below
#   ./scripts/test.sh --openstack     a small real OpenStack on this host (testhosts/openstack:
#                                     keystone, placement, nova 34 with virtdriver's compute driver
#                                     on the host's libvirtd, glance, neutron, Cinder on a Ceph of
#                                     its own; venv and databases cached under /var/tmp), then
#                                     tests/openstack (nova's REST API at 2.60) and tempest's
#                                     multiattach tests (testhosts/openstack/tempest/run.sh), then
#                                     down again if this run brought it up
#   ./scripts/test.sh --nested        tests/nested inside the nested test host, once with SELinux
#                                     enforcing and once with AppArmor (scripts/test-nested.sh;
#                                     image cached under /var/tmp/virtdriver-nested, about 15 min
#                                     on a fresh machine: testhosts/README.md)
#
# Layer options combine (--fast --nova). Without one, everything runs: pytest over the fast and
# the host tests in one session, then the debian13 stack, then nova, then openstack, then nested;
# VIRTDRIVER_SKIP_STACK=1, VIRTDRIVER_SKIP_NOVA=1, VIRTDRIVER_SKIP_OPENSTACK=1 and
# VIRTDRIVER_SKIP_NESTED=1 leave those out
# of the whole run (CI runs them). Arguments after the
# options (or after --) go to pytest; those that name tests (tests/...) replace the folders.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"

fast=0 hypervisor=0 nova=0 openstack=0 nested=0 chosen=0 stack=""
while [ $# -gt 0 ]; do
    case "$1" in
        --fast) fast=1 chosen=1 ;;
        --hypervisor) hypervisor=1 chosen=1 ;;
        --nova) nova=1 chosen=1 ;;
        --openstack) openstack=1 chosen=1 ;;
        --nested) nested=1 chosen=1 ;;
        --stack)
            case "${2:-}" in
                debian13|debian13-split) stack="$stack $2" chosen=1 ;;
                *) echo "test.sh: --stack takes debian13 or debian13-split" >&2; exit 2 ;;
            esac
            shift ;;
        --) shift; break ;;
        *) break ;;
    esac
    shift
done
if [ "$chosen" = 0 ]; then
    fast=1 hypervisor=1
    [ "${VIRTDRIVER_SKIP_STACK:-0}" = 1 ] || stack="debian13 debian13-split"
    [ "${VIRTDRIVER_SKIP_NOVA:-0}" = 1 ] || nova=1
    [ "${VIRTDRIVER_SKIP_OPENSTACK:-0}" = 1 ] || openstack=1
    [ "${VIRTDRIVER_SKIP_NESTED:-0}" = 1 ] || nested=1
fi

status=0
# What each layer cost and how it ended, said last (CI shows the tail of this run's output): one
# line a layer with its wall time and the closing counts of its test runners. Each layer's whole
# output, pytest's 25 slowest tests of the host layers among it, is kept in build/test-logs/.
logs=$here/build/test-logs
rm -rf "$logs" && mkdir -p "$logs"
summary=()
logged() {  # logged NAME COMMAND...: runs COMMAND, its output also kept in $logs/NAME.log
    local log="$logs/${1//[^A-Za-z0-9._-]/-}.log"
    shift
    "$@" 2>&1 | tee -a "$log"
    return "${PIPESTATUS[0]}"
}
tally() {  # tally NAME: the test runners' closing lines in NAME's log (pytest, stestr), one line
    local log="$logs/${1//[^A-Za-z0-9._-]/-}.log"
    [ -f "$log" ] || return 0
    sed -E 's/^\[[^]]*\] *//; s/^pytest: //; s/^=+ //; s/ =+$//' "$log" \
        | grep -E '^[0-9]+ (passed|failed|errors?|skipped|deselected)|^no tests ran|^ - (Passed|Failed|Skipped): [0-9]+' \
        | awk '!seen[$0]++' | paste -sd ';' - || true
}
ran() {  # ran NAME STARTED RC: one line of the closing summary
    local word=ok counts
    [ "$3" = 0 ] || { word="FAILED (exit $3)"; status=1; }
    counts=$(tally "$1")
    summary+=("$(printf '%-32s %6d s  %-16s %s' "$1" $(( SECONDS - $2 )) "$word" "$counts")")
}
started_backends=0 started_cinder=0 started_stack=0 started_openstack=0
cleanup() {
    local line
    if [ "$started_openstack" = 1 ]; then ./scripts/test-openstack.sh down || true; fi
    if [ "$started_stack" = 1 ]; then testhosts/debian13/run.sh down || true; fi
    if [ "$started_cinder" = 1 ]; then ./scripts/test-cinder.sh down || true; fi
    if [ "$started_backends" = 1 ]; then ./scripts/test-backends.sh down || true; fi
    echo "test.sh: layer                            time    result           counts" >&2
    for line in "${summary[@]}"; do echo "test.sh: $line" >&2; done
    echo "test.sh: the whole run took $SECONDS s, exit $status" >&2
}
trap cleanup EXIT
# The layer's folders, unless the pytest arguments name tests of their own.
args=("$@")
layer() {
    local a
    for a in "${args[@]}"; do case "$a" in tests/*) return ;; esac; done
    echo "$@"
}
# What the second stack runs of tests/host (#47): attach/detach, races, state damage, extend,
# swap, migration between two daemons, doctor, the demo, the README tour, render on the host,
# the in-guest tests.
STACK_TESTS=(tests/host/test_hypervisor.py tests/host/test_races.py
             tests/host/test_state_damage.py tests/host/test_extend_backends.py
             tests/host/test_cli_swap_extend.py tests/host/test_swap_promises.py
             tests/host/test_migration.py tests/host/test_doctor_audit.py tests/host/test_demo.py
             tests/host/test_readme_tour.py tests/host/test_connect_checks.py
             tests/host/test_cli.py tests/inguest)
# What it runs again against the split daemons (#47 item 3, #57 item 2): only what talks to the
# daemons themselves, where a split host can break differently --
#   test_state_damage     a daemon restart is a virtqemud restart there (with virtsecretd's secrets)
#   test_migration        migration between two virtqemuds, each asking its own virtsecretd
#   test_extend_backends  network disks whose secrets virtqemud asks virtsecretd for (rbd, iSCSI,
#                         Gluster)
#   test_doctor_audit     doctor finds the daemon by its socket (virtqemud-sock, no libvirt-sock)
#   test_readme_tour      the README's commands as written, virsh included, on a RHEL-like host
# Not again: test_hypervisor, test_races and test_swap_promises talk to QEMU through the QEMU
# driver, which is the same code in virtqemud as in libvirtd (the debian13 layer runs them on
# libvirt 11 and QEMU 10).
SPLIT_TESTS=(tests/host/test_state_damage.py tests/host/test_migration.py
             tests/host/test_extend_backends.py tests/host/test_doctor_audit.py
             tests/host/test_readme_tour.py)
if [ "$hypervisor" = 1 ] || [ "$nova" = 1 ] || [ "$openstack" = 1 ] || [ "$nested" = 1 ] \
        || [ -n "$stack" ] \
        || [ ! -x .venv/bin/python ] \
        || [ pyproject.toml -nt .venv/.virtdriver-installed ]; then
    t=$SECONDS rc=0
    ./scripts/setup-host.sh || rc=$?
    ran "host setup" "$t" "$rc"
    [ "$rc" = 0 ] || exit 1
fi

if [ "$fast" = 1 ]; then
    # types and style, with the settings in pyproject.toml (a few seconds):
    # mypy --strict as pyproject.toml states it, ruff with the rules chosen there
    t=$SECONDS rc=0
    .venv/bin/mypy || rc=$?
    ran mypy "$t" "$rc"
    t=$SECONDS rc=0
    .venv/bin/ruff check virtdriver tests testhosts benchmarks || rc=$?
    ran ruff "$t" "$rc"
fi

backends_up() {  # the storage test backends on 127.0.0.1, for this host and the second stack
    if [ "$started_backends" = 0 ] && ! ./scripts/test-backends.sh status >/dev/null 2>&1; then
        started_backends=1
        ./scripts/test-backends.sh up || echo "test.sh: some storage backends did not start" >&2
    fi
}

if [ "$hypervisor" = 1 ]; then
    backends_up
    # a real Cinder on the test Ceph (scripts/test-cinder.sh; its venv is cached under /var/tmp):
    # 6.5-10.6 s to start (db sync + one process), about 1.5 minutes more the first time (its venv)
    if ! ./scripts/test-cinder.sh status >/dev/null 2>&1; then
        started_cinder=1
        ./scripts/test-cinder.sh up || echo "test.sh: Cinder did not start" >&2
    fi
    folders=(tests/host tests/inguest)
    [ "$fast" = 1 ] && folders=(tests/fast "${folders[@]}")  # one session: fast and host tests
    t=$SECONDS rc=0
    logged "pytest ${folders[*]}" .venv/bin/python -m pytest --durations=25 \
        $(layer "${folders[@]}") "$@" || rc=$?
    ran "pytest ${folders[*]}" "$t" "$rc"
    # The benchmark report in its quick mode (about half a minute, into a temporary directory):
    # it must keep running; benchmarks/report.py without --quick makes the committed report.
    quick=$(mktemp -d) t=$SECONDS rc=0
    .venv/bin/python benchmarks/report.py --quick --out "$quick" >"$quick/log" 2>&1 || rc=$?
    if [ "$rc" != 0 ]; then
        echo "test.sh: benchmarks/report.py --quick failed:" >&2
        tail -20 "$quick/log" >&2
    fi
    ran "benchmark report --quick" "$t" "$rc"
    rm -rf "$quick"
elif [ "$fast" = 1 ]; then
    # both cores (pytest-xdist): the fast tests share no host state
    t=$SECONDS rc=0
    logged "pytest tests/fast" .venv/bin/python -m pytest -q -n auto $(layer tests/fast) "$@" || rc=$?
    ran "pytest tests/fast" "$t" "$rc"
fi
in_stack() { testhosts/debian13/run.sh exec "$@"; }
stack_up() {  # stack_up NAME DAEMONS: the debian13 stack up with libvirtd or the split daemons
    local t=$SECONDS rc=0
    if ! VIRTDRIVER_DEBIAN13_DAEMONS=$2 testhosts/debian13/run.sh status >/dev/null 2>&1; then
        started_stack=1
        VIRTDRIVER_DEBIAN13_DAEMONS=$2 testhosts/debian13/run.sh up || rc=$?
    fi
    ran "$1 stack up" "$t" "$rc"
    return "$rc"
}
case " $stack " in *" debian13 "*)
    backends_up
    if stack_up debian13 libvirtd; then
        # Python 3.13's fast layer, then the host tests against libvirt 11 and QEMU 10
        t=$SECONDS rc=0
        logged "debian13 tests/fast" in_stack python -m pytest -q -n auto -p no:cacheprovider \
            $(layer tests/fast) "$@" || rc=$?
        ran "debian13 tests/fast" "$t" "$rc"
        t=$SECONDS rc=0
        logged "debian13 host tests" in_stack python -m pytest -p no:cacheprovider --durations=25 \
            $(layer "${STACK_TESTS[@]}") "$@" || rc=$?
        ran "debian13 host tests" "$t" "$rc"
    fi
esac
case " $stack " in *" debian13-split "*)
    backends_up
    if stack_up debian13-split split; then  # (restarts a stack that runs libvirtd)
        t=$SECONDS rc=0
        logged "debian13-split host tests" in_stack python -m pytest -p no:cacheprovider \
            --durations=25 $(layer "${SPLIT_TESTS[@]}") "$@" || rc=$?
        ran "debian13-split host tests" "$t" "$rc"
    fi
esac
if [ "$nova" = 1 ]; then
    t=$SECONDS rc=0
    logged "nova suite" ./scripts/nova-suite.sh || rc=$?
    ran "nova suite" "$t" "$rc"
fi
if [ "$openstack" = 1 ]; then
    # The control plane (cold: apt, venv, databases about 5 min; warm about 1.5 min), nova's REST
    # API at 2.60 through it, tempest's multiattach tests; then down, before the nested VMs.
    t=$SECONDS rc=0
    if ! ./scripts/test-openstack.sh status >/dev/null 2>&1; then
        started_openstack=1
        ./scripts/test-openstack.sh up || rc=$?
    fi
    ran "openstack up" "$t" "$rc"
    if [ "$rc" = 0 ]; then
        t=$SECONDS rc=0
        VD_OS_REQUIRED=1 logged "openstack tests/openstack" .venv/bin/python -m pytest \
            -p no:cacheprovider --durations=25 $(layer tests/openstack) "$@" || rc=$?
        ran "openstack tests/openstack" "$t" "$rc"
        t=$SECONDS rc=0
        VD_TEMPEST_RESULTS=$here/build/openstack logged "openstack tempest" \
            testhosts/openstack/tempest/run.sh || rc=$?
        ran "openstack tempest" "$t" "$rc"
    fi
    if [ "$started_openstack" = 1 ]; then
        t=$SECONDS rc=0
        ./scripts/test-openstack.sh down || rc=$?
        started_openstack=0
        ran "openstack down" "$t" "$rc"
    fi
fi
if [ "$nested" = 1 ]; then
    # One VM at a time (2 cores): SELinux, then AppArmor; the image is built once for both.
    for lsm in selinux apparmor; do
        t=$SECONDS rc=0
        logged "nested $lsm" ./scripts/test-nested.sh --lsm "$lsm" || rc=$?
        ran "nested $lsm" "$t" "$rc"
    done
fi
exit $status
