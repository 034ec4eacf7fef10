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
# Layer options combine (--fast --nova). Without one, everything runs: the nested boots start in
# the background (one VM at a time, SELinux then AppArmor: they spend their time in QEMU's TCG,
# the host's layers theirs mostly waiting on guests and daemons), while the fast and host tests
# run (two pytest-xdist workers, then the tests marked whole_host alone), then the debian13
# stacks, nova and openstack; the run ends when the nested boots have;
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
# line a layer with its wall time, how busy both cores were meanwhile (/proc/stat: what another
# layer can still overlap with) and the closing counts of its test runners. Each layer's whole
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
    sed -E 's/\r$//; s/^\[[^]]*\] *//; s/^pytest: //; s/^=+ //; s/ =+$//' "$log" \
        | grep -E '^[0-9]+ (passed|failed|errors?|skipped|deselected)|^no tests ran|^ - (Passed|Failed|Skipped): [0-9]+' \
        | awk '!seen[$0]++' | paste -sd ';' - || true
}
cpu_now() {  # busy and total jiffies of both cores so far
    awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8}' /proc/stat
}
busy_since() {  # busy_since "BUSY TOTAL": the percentage of both cores busy since then
    local now
    now=$(cpu_now)
    awk -v a="$1" -v b="$now" 'BEGIN {split(a, x, " "); split(b, y, " ");
        d = y[2] - x[2]; printf "%d", (d > 0 ? 100 * (y[1] - x[1]) / d : 0)}'
}
t=0 c="0 0" rc=0
begin() { t=$SECONDS c=$(cpu_now) rc=0; }  # a layer starts: its clock, the cores' counters
ran() {  # ran NAME RC [SECONDS BUSY]: one line of the closing summary, for the layer begun last
    local word=ok counts secs=${3:-$(( SECONDS - t ))} busy=${4:-$(busy_since "$c")}
    [ "$2" = 0 ] || { word="FAILED (exit $2)"; status=1; }
    counts=$(tally "$1")
    summary+=("$(printf '%-34s %5d s %4s%%  %-16s %s' "$1" "$secs" "$busy" "$word" "$counts")")
}
started_backends=0 started_cinder=0 started_stack=0 started_openstack=0
nested_job="" builds_job=""
cleanup() {
    local line job
    for job in $nested_job $builds_job; do kill -TERM -- "-$job" 2>/dev/null || true; done
    wait
    if [ "$started_openstack" = 1 ]; then ./scripts/test-openstack.sh down || true; fi
    if [ "$started_stack" = 1 ]; then testhosts/debian13/run.sh down || true; fi
    if [ "$started_cinder" = 1 ]; then ./scripts/test-cinder.sh down || true; fi
    if [ "$started_backends" = 1 ]; then ./scripts/test-backends.sh down || true; fi
    echo "test.sh: layer                                time   cpu  result           counts" >&2
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
# What the second stack runs of tests/host (#47), each where libvirt 11, QEMU 10 or Python 3.13
# can break it differently (#57 item 2); the rest of tests/host proves what they cannot change --
#   test_hypervisor       hot-plug, unplug and DEVICE_REMOVED through QEMU 10's -blockdev
#   test_races            libvirt 11's job locks under two processes attaching one volume
#   test_state_damage     libvirt 11's status and definitions read back after damage
#   test_extend_backends  block_resize of network disks in QEMU 10 (rbd, iSCSI, NBD, Gluster)
#   test_cli_swap_extend, test_swap_promises  blockcopy and pivot, QEMU 10's mirror jobs
#   test_migration        migration between two libvirt 11 daemons, QEMU 10's migration stream
#   test_doctor_audit     doctor and audit over libvirt 11's capabilities and live XML
#   test_demo             the demo on libvirt 11's embedded QEMU driver (qemu:///embed)
#   test_readme_tour      the README's commands as written, virsh 11 included
#   test_connect_checks   the os-brick and multipathd floor, with Debian 13's os-brick
#   test_cli              render asking libvirt 11's host, readers closed by Python 3.13
#   tests/inguest         what a Linux guest sees through QEMU 10 (reservations, migration)
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
# Both stacks run their lists on two pytest-xdist workers, as this host does; neither list holds a
# module marked whole_host (those run here only).
SPLIT_TESTS=(tests/host/test_state_damage.py tests/host/test_migration.py
             tests/host/test_extend_backends.py tests/host/test_doctor_audit.py
             tests/host/test_readme_tour.py)
if [ "$hypervisor" = 1 ] || [ "$nova" = 1 ] || [ "$openstack" = 1 ] || [ "$nested" = 1 ] \
        || [ -n "$stack" ] \
        || [ ! -x .venv/bin/python ] \
        || [ pyproject.toml -nt .venv/.virtdriver-installed ]; then
    begin
    ./scripts/setup-host.sh || rc=$?
    ran "host setup" "$rc"
    [ "$rc" = 0 ] || exit 1
fi

if [ "$fast" = 1 ]; then
    # types and style, with the settings in pyproject.toml (a few seconds):
    # mypy --strict as pyproject.toml states it, ruff with the rules chosen there
    begin
    .venv/bin/mypy || rc=$?
    ran mypy "$rc"
    begin
    .venv/bin/ruff check virtdriver tests testhosts benchmarks || rc=$?
    ran ruff "$rc"
fi

if [ -n "$stack" ]; then
    # The Debian 13 tree and the split daemons' build (testhosts/debian13: about 2 and 8 minutes on
    # a fresh machine, nothing when cached) begin in the background too, in a process group of
    # their own; the stacks wait for them.
    debian13_builds() {
        testhosts/debian13/build-tree.sh >/dev/null || return 1
        case " $stack " in *" debian13-split "*) testhosts/debian13/build-split.sh >/dev/null ;; esac
    }
    set -m
    debian13_builds </dev/null >"$logs/debian13-builds.log" 2>&1 &
    builds_job=$!
    set +m
fi
if [ "$nested" = 1 ]; then
    # The nested boots in the background, in a process group of their own (stopped with this
    # run): SELinux, then AppArmor, one VM at a time; the image is built once for both. Their
    # output goes to their logs only (the end of a failed one is shown when they are collected).
    nested_boots() {
        local lsm t0 c0 rc
        for lsm in selinux apparmor; do
            t0=$SECONDS c0=$(cpu_now) rc=0
            ./scripts/test-nested.sh --lsm "$lsm" >"$logs/nested-$lsm.log" 2>&1 || rc=$?
            echo "nested $lsm|$rc|$(( SECONDS - t0 ))|$(busy_since "$c0")" >>"$logs/nested.ran"
        done
    }
    set -m
    nested_boots </dev/null &
    nested_job=$!
    set +m
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
    # Two workers, a module each at a time (its tests share module fixtures and may share files);
    # every test makes its own guests, loop devices, state and lock directories. Then the tests
    # that need the host to themselves (marked whole_host, each module saying why).
    begin
    logged "pytest ${folders[*]}" .venv/bin/python -m pytest -n 2 --dist loadfile \
        -m "not whole_host" --durations=25 $(layer "${folders[@]}") "$@" || rc=$?
    [ "$rc" != 5 ] || rc=0  # the arguments named only whole_host tests
    ran "pytest ${folders[*]}" "$rc"
    begin
    logged "pytest whole_host" .venv/bin/python -m pytest -m whole_host --durations=25 \
        $(layer "${folders[@]}") "$@" || rc=$?
    [ "$rc" != 5 ] || rc=0  # the arguments named no such test
    ran "pytest whole_host" "$rc"
    # The benchmark report in its quick mode (about half a minute, into a temporary directory):
    # it must keep running; benchmarks/report.py without --quick makes the committed report.
    quick=$(mktemp -d)
    begin
    .venv/bin/python benchmarks/report.py --quick --out "$quick" >"$quick/log" 2>&1 || rc=$?
    if [ "$rc" != 0 ]; then
        echo "test.sh: benchmarks/report.py --quick failed:" >&2
        tail -20 "$quick/log" >&2
    fi
    ran "benchmark report --quick" "$rc"
    rm -rf "$quick"
elif [ "$fast" = 1 ]; then
    # both cores (pytest-xdist): the fast tests share no host state
    begin
    logged "pytest tests/fast" .venv/bin/python -m pytest -q -n auto $(layer tests/fast) "$@" || rc=$?
    ran "pytest tests/fast" "$rc"
fi
in_stack() { testhosts/debian13/run.sh exec "$@"; }
stack_up() {  # stack_up NAME DAEMONS: the debian13 stack up with libvirtd or the split daemons
    begin
    if ! VIRTDRIVER_DEBIAN13_DAEMONS=$2 testhosts/debian13/run.sh status >/dev/null 2>&1; then
        started_stack=1
        VIRTDRIVER_DEBIAN13_DAEMONS=$2 testhosts/debian13/run.sh up || rc=$?
    fi
    ran "$1 stack up" "$rc"
    return "$rc"
}
if [ -n "$builds_job" ]; then
    begin
    wait "$builds_job" || rc=$?
    builds_job=""
    [ "$rc" = 0 ] || tail -n 30 "$logs/debian13-builds.log"
    ran "debian13 builds (waited for)" "$rc"
fi
case " $stack " in *" debian13 "*)
    backends_up
    if stack_up debian13 libvirtd; then
        # Python 3.13's fast layer, then the host tests against libvirt 11 and QEMU 10
        begin
        logged "debian13 tests/fast" in_stack python -m pytest -q -n auto -p no:cacheprovider \
            $(layer tests/fast) "$@" || rc=$?
        ran "debian13 tests/fast" "$rc"
        begin
        logged "debian13 host tests" in_stack python -m pytest -p no:cacheprovider --durations=25 \
            -n 2 --dist loadfile $(layer "${STACK_TESTS[@]}") "$@" || rc=$?
        ran "debian13 host tests" "$rc"
    fi
esac
case " $stack " in *" debian13-split "*)
    backends_up
    if stack_up debian13-split split; then  # (restarts a stack that runs libvirtd)
        begin
        logged "debian13-split host tests" in_stack python -m pytest -p no:cacheprovider \
            --durations=25 -n 2 --dist loadfile $(layer "${SPLIT_TESTS[@]}") "$@" || rc=$?
        ran "debian13-split host tests" "$rc"
    fi
esac
if [ "$nova" = 1 ]; then
    begin
    logged "nova suite" ./scripts/nova-suite.sh || rc=$?
    ran "nova suite" "$rc"
fi
if [ "$openstack" = 1 ]; then
    # The control plane (cold: apt, venv, databases about 5 min; warm about 1.5 min), nova's REST
    # API at 2.60 through it, tempest's multiattach tests; then down, before the nested VMs.
    begin
    if ! ./scripts/test-openstack.sh status >/dev/null 2>&1; then
        started_openstack=1
        ./scripts/test-openstack.sh up || rc=$?
    fi
    ran "openstack up" "$rc"
    if [ "$rc" = 0 ]; then
        begin
        VD_OS_REQUIRED=1 logged "openstack tests/openstack" .venv/bin/python -m pytest \
            -p no:cacheprovider --durations=25 $(layer tests/openstack) "$@" || rc=$?
        ran "openstack tests/openstack" "$rc"
        begin
        VD_TEMPEST_RESULTS=$here/build/openstack logged "openstack tempest" \
            testhosts/openstack/tempest/run.sh || rc=$?
        ran "openstack tempest" "$rc"
    fi
    if [ "$started_openstack" = 1 ]; then
        begin
        ./scripts/test-openstack.sh down || rc=$?
        started_openstack=0
        ran "openstack down" "$rc"
    fi
fi
if [ -n "$nested_job" ]; then
    # the nested boots begun in the background: wait for them, say how each ended
    begin
    wait "$nested_job" || true
    nested_job=""
    ran "(waiting for the nested boots)" 0
    touch "$logs/nested.ran"
    for lsm in selinux apparmor; do
        line=$(grep "^nested $lsm|" "$logs/nested.ran" || echo "nested $lsm|1|0|0")
        IFS='|' read -r name rc secs busy <<<"$line"
        [ "$rc" = 0 ] || tail -n 60 "$logs/nested-$lsm.log" 2>/dev/null || true
        ran "$name" "$rc" "$secs" "$busy"
    done
fi
exit $status
