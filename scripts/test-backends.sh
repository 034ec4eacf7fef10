#!/usr/bin/env bash
# Real storage servers on 127.0.0.1 for virtdriver's test suite.
#
#   scripts/test-backends.sh [--strict] up     [iscsi|nbd|ceph|gluster ...]   (default: all four)
#   scripts/test-backends.sh            down   [iscsi|nbd|ceph|gluster ...]   (all: also removes the state dir)
#   scripts/test-backends.sh            status [iscsi|nbd|ceph|gluster ...]   (exit 0 only if all asked are up)
#   scripts/test-backends.sh            env                                   (export KEY=VALUE lines)
#
#   eval "$(scripts/test-backends.sh env)"
#
# Backends (each independent: one failing does not stop the others; `up` exits non-zero for a
# failure only with --strict):
#   iscsi    tgtd (userspace target) on 127.0.0.1:3260, one LUN without auth, one with CHAP,
#            and LUN 2 beside the first for the SCSI persistent-reservation tests
#   nbd      qemu-nbd --shared=16 --persistent on 127.0.0.1:10809, one named export
#   ceph     one mon + one memstore OSD, cephx, pool `volumes`, user client.volumes, one RBD image
#   gluster  glusterd + one brick, volume `vdvol`, FUSE-mountable (127.0.0.1:/vdvol) and gluster://
#
# All state (images, configs, keyrings, logs, pid files) lives under $VIRTDRIVER_BACKENDS_DIR
# (default /var/tmp/virtdriver-backends).  Only processes whose command line names that directory
# are ever stopped.  Needs root (installs packages, runs daemons, mounts FUSE).
#
# Overridable: VD_ISCSI_PORT VD_TGT_CONTROL_PORT VD_NBD_PORT VD_NBD_SHARED VD_CEPH_MON_PORT
#              VD_CEPH_MON_V2_PORT VD_GLUSTER_BRICK_HOST VD_BACKENDS_NO_INSTALL=1
set -uo pipefail
export LC_ALL=C

S=${VIRTDRIVER_BACKENDS_DIR:-/var/tmp/virtdriver-backends}
S=${S%/}
ALL_BACKENDS="iscsi nbd ceph gluster"
HOST=127.0.0.1

LUN_BYTES=$((64 * 1024 * 1024))         # every test disk (iSCSI LUNs, NBD, RBD, Gluster file)

# Each backend is one file with one contract (scripts/backends/lib.sh says it): its constants,
# packages, check, start, stop, alive and env; the helpers they share are in lib.sh.
backends_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/backends
# shellcheck source=scripts/backends/lib.sh
. "$backends_dir/lib.sh"
for b in $ALL_BACKENDS; do
    # shellcheck source=/dev/null
    . "$backends_dir/$b.sh"
done

# =============================================================================================
# commands
# =============================================================================================
# quick liveness (no protocol round trip) for `env`
alive() { "alive_$1"; }

cmd_up() {
    mkdir -p "$S"
    local t0 b failed=() tb rc
    t0=$(now)
    ensure_packages "$@"
    for b in "$@"; do
        tb=$(now)
        if check_$b; then
            log "$b: already up"
            continue
        fi
        # leftovers of an earlier, broken run (ours only); fd 9 (the lock) must not reach daemons
        ( stop_$b ) >/dev/null 2>&1 9>&-
        (
            set -eE
            trap 'case $BASH_COMMAND in return*) ;; *) log "$b: failed (exit $?): $BASH_COMMAND" ;; esac' ERR
            start_$b
        ) 9>&-
        rc=$?
        if ((rc == 0)) && check_$b; then
            log "$b: up in $(since "$tb")s"
        else
            log "$b: FAILED to come up (state in $S/$b)"
            failed+=("$b")
        fi
    done
    log "up finished in $(since "$t0")s${failed:+; failed: ${failed[*]}}"
    ((${#failed[@]} == 0)) || ((!STRICT))
}

cmd_down() {
    local b all=0 p
    [ "$*" = "$ALL_BACKENDS" ] && all=1
    for b in "$@"; do stop_$b; log "$b: down"; done
    if ((all)); then
        umount_below_state
        # safety net: any daemon of ours still running (e.g. after a lost pid file)
        p=$(our_daemon_pids)
        if [ -n "$p" ]; then log "stopping leftover daemons: $(echo $p)"; stop_pids 5 $p; fi
        rm -rf "$S"
        rm -f "$S.lock"
    fi
    return 0
}

cmd_status() {
    local b rc=0
    for b in "$@"; do
        if check_$b; then echo "$b: up"; else echo "$b: down"; rc=1; fi
    done
    return $rc
}

cmd_env() {
    kv VIRTDRIVER_BACKENDS_DIR "$S"
    local b up
    for b in $ALL_BACKENDS; do
        if [ -d "$S/$b" ] && alive "$b"; then up=1; else up=0; fi
        kv "VD_$(echo "$b" | tr a-z A-Z)_UP" $up
        env_$b
    done
}

usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

STRICT=0
args=()
for a in "$@"; do
    case "$a" in
        --strict) STRICT=1 ;;
        -h|--help) usage ;;
        *) args+=("$a") ;;
    esac
done
set -- "${args[@]}"
cmd=${1:-}; shift || true
backends=("$@")
((${#backends[@]})) || backends=($ALL_BACKENDS)
for b in "${backends[@]}"; do
    [[ " $ALL_BACKENDS " == *" $b "* ]] || die "unknown backend '$b' (known: $ALL_BACKENDS)"
done

case "$cmd" in
    up|down)
        [ "$(id -u)" = 0 ] || die "$cmd needs root"
        mkdir -p "$(dirname "$S")"
        exec 9>"$S.lock"
        flock -w 600 9 || die "another $0 holds $S.lock"
        "cmd_$cmd" "${backends[@]}"
        ;;
    status) cmd_status "${backends[@]}" ;;
    env)    cmd_env ;;
    *)      usage ;;
esac
