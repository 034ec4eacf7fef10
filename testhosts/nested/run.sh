#!/usr/bin/env bash
# Boot the nested test host once and run pytest inside it.
#
#   testhosts/nested/run.sh --lsm selinux|apparmor [--results DIR] [--timeout SECONDS] \
#                           [--] [pytest args...]
#
# Builds or reuses the image (build-image.sh) and the wheelhouse with the VM's venv
# (build-wheelhouse.sh), writes the payload disk (a tar of the working tree and the run's
# settings), boots the image under QEMU TCG with four disks (vda: the image, as a throw-away
# snapshot; vdb: the payload; vdc: the results, a tar the guest writes; vdd: the venv,
# read-only), streams the serial console here with a "[nested-LSM] " prefix, and unpacks the results into DIR (default build/nested/LSM).
# Exit status: pytest's inside the VM; 124 on a timeout; 1 when the VM gave no results.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

lsm=""
results=""
timeout_s=${VIRTDRIVER_NESTED_TIMEOUT:-2400}
memory=${VIRTDRIVER_NESTED_MEMORY:-3072}
cpus=${VIRTDRIVER_NESTED_CPUS:-2}
while (($#)); do
    case "$1" in
        --lsm) lsm=${2:?--lsm needs selinux or apparmor}; shift 2 ;;
        --lsm=*) lsm=${1#--lsm=}; shift ;;
        --results) results=${2:?}; shift 2 ;;
        --timeout) timeout_s=${2:?}; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) break ;;
    esac
done
case "$lsm" in
    selinux) append_lsm="selinux=1 security=selinux enforcing=1" ;;
    apparmor) append_lsm="apparmor=1 security=apparmor" ;;
    *) echo "run.sh: --lsm selinux|apparmor is required" >&2; exit 2 ;;
esac
pytest_args=("$@")
((${#pytest_args[@]})) || pytest_args=(tests/nested)
results=${results:-$repo/build/nested/$lsm}
tag="[nested-$lsm]"
say() { printf '%s %s\n' "$tag" "$*"; }

[ "$(id -u)" = 0 ] || { say "must run as root"; exit 1; }
if ! command -v qemu-system-x86_64 >/dev/null; then
    say "installing qemu-system-x86"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends qemu-system-x86 >/dev/null
fi

# One nested VM at a time on this machine (2 cores, shared): a second run waits here.
mkdir -p /var/tmp/virtdriver-nested
exec 8>/var/tmp/virtdriver-nested/vm.lock
if ! flock -n 8; then
    say "another nested VM is running; waiting for it"
    flock 8
fi

t0=$SECONDS
image=$("$here/build-image.sh")
t_image=$((SECONDS - t0))
t0=$SECONDS
wheels=$("$here/build-wheelhouse.sh" "$repo")
t_wheels=$((SECONDS - t0))

# ---- the payload disk: project, settings ---------------------------------------------
t0=$SECONDS
run=$(mktemp -d /var/tmp/virtdriver-nested/run-XXXXXX)
qemu_pid=""
cleanup() {
    if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
        kill "$qemu_pid" 2>/dev/null || true
        wait "$qemu_pid" 2>/dev/null || true
    fi
    rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$run/stage/project"
# The working tree as git sees it: tracked files that exist, plus untracked non-ignored ones.
(cd "$repo" && git ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' f; do [ -e "$f" ] || [ -L "$f" ] && printf '%s\0' "$f"; done \
    | tar cf - --null -T -) | tar xf - -C "$run/stage/project"
{
    printf 'LSM=%q\n' "$lsm"
    printf 'PYTEST_ARGS=('; printf '%q ' "${pytest_args[@]}"; printf ')\n'
} >"$run/stage/nested.env"
# QEMU capabilities a previous boot of this image probed (see guest-run.sh).
caps_seed=()
if [ -d "$image/qemu-caps" ]; then cp -r "$image/qemu-caps" "$run/stage/"; caps_seed=(qemu-caps); fi
tar cf "$run/payload.tar" -C "$run/stage" nested.env project "${caps_seed[@]}"
truncate -s 256M "$run/results.raw"
t_payload=$((SECONDS - t0))
say "image $image ($t_image s), wheelhouse $wheels ($t_wheels s), payload $(du -h "$run/payload.tar" | cut -f1) ($t_payload s)"

# ---- boot ----------------------------------------------------------------------------------------
# TCG: this machine's KVM cannot boot a Debian kernel (HOST.md). -snapshot-like: the image is
# opened with snapshot=on, so every boot starts from the same cached image.
say "booting ($lsm, $cpus vCPUs, $memory MiB, timeout ${timeout_s} s)"
t0=$SECONDS
status=0
set +e
# In the background so that an interrupted run.sh stops it (cleanup signals `timeout`, which
# passes the signal on to QEMU); the console goes through sed for its prefix.
timeout -k 10 "$timeout_s" \
    qemu-system-x86_64 -name "vdnested-$lsm" -accel tcg,thread=multi -cpu max -smp "$cpus" \
        -m "$memory" -machine q35 -nodefaults -no-user-config -display none \
        -serial stdio -monitor none -nic none -no-reboot \
        -kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
        -append "root=/dev/vda rw console=ttyS0 $append_lsm virtdriver.nested=1 systemd.show_status=0 loglevel=4" \
        -drive "file=$image/rootfs.img,format=raw,if=virtio,snapshot=on" \
        -drive "file=$run/payload.tar,format=raw,if=virtio,readonly=on" \
        -drive "file=$run/results.raw,format=raw,if=virtio" \
        -drive "file=$wheels/prebuilt/venv.img,format=raw,if=virtio,readonly=on" \
        </dev/null > >(sed -u "s/^/$tag /") 2>&1 &
qemu_pid=$!
wait "$qemu_pid"
status=$?
qemu_pid=""
wait 2>/dev/null || true  # the console's sed, so its last lines come before ours
set -e
t_vm=$((SECONDS - t0))

# ---- results -------------------------------------------------------------------------------------
rm -rf "$results"
mkdir -p "$results"
tar xf "$run/results.raw" -C "$results" 2>/dev/null || true
if [ "$status" = 124 ]; then
    say "TIMEOUT: the VM did not finish in ${timeout_s} s"
fi
if [ ! -f "$results/pytest-exit" ]; then
    say "the VM produced no pytest result (qemu exit $status after $t_vm s); results: $results"
    [ "$status" = 124 ] && exit 124
    exit 1
fi
rc=$(cat "$results/pytest-exit")
if [ ! -d "$image/qemu-caps" ] && compgen -G "$results/qemu-caps/*.xml" >/dev/null; then
    { cp -r "$results/qemu-caps" "$image/qemu-caps.tmp" && mv "$image/qemu-caps.tmp" "$image/qemu-caps"; } \
        2>/dev/null || true
fi
echo "image $t_image wheelhouse $t_wheels payload $t_payload vm $t_vm" >"$results/host-timings.txt"
say "$(cat "$results/mode.txt" 2>/dev/null || echo 'mode: unknown')"
say "VM ran $t_vm s; in-VM steps: $(tr '\n' ' ' <"$results/timings.txt" 2>/dev/null)"
summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error|skipped|deselected)|no tests ran' \
          "$results/pytest.txt" | tail -n 1 || true)
say "pytest: ${summary:-no summary line (see $results/pytest.txt)}"
say "results in $results (junit.xml, pytest.txt, avc/audit, sestatus/aa-status, libvirt logs)"
exit "$rc"
