# shellcheck shell=bash
# iSCSI: tgtd (userspace target) on 127.0.0.1, one LUN without auth, one with CHAP, and LUN 2
# beside the first for the SCSI persistent-reservation tests.
# (one backend of scripts/test-backends.sh; the contract: scripts/backends/lib.sh)

ISCSI_PORT=${VD_ISCSI_PORT:-3260}
TGT_CP=${VD_TGT_CONTROL_PORT:-3260}      # names tgtd's control socket /var/run/tgtd/socket.N
ISCSI_IQN=iqn.2026-01.io.virtdriver:noauth
ISCSI_CHAP_IQN=iqn.2026-01.io.virtdriver:chap
ISCSI_CHAP_USER=vdchap

iscsi_PACKAGES="tgt"

TGTADM() { tgtadm -C "$TGT_CP" --lld iscsi "$@"; }

check_iscsi() {
    local d=$S/iscsi out
    pidfile_ours "$d/tgtd.pid" || return 1
    port_owned_by "$ISCSI_PORT" "$(pidfile_pid "$d/tgtd.pid")" || return 1
    out=$(timeout 5 tgtadm -C "$TGT_CP" --lld iscsi --op show --mode target 2>/dev/null) || return 1
    grep -q "$ISCSI_IQN\$" <<<"$out" && grep -q "$ISCSI_CHAP_IQN\$" <<<"$out" &&
        grep -q "^ *$ISCSI_CHAP_USER\$" <<<"$out"
}

start_iscsi() {
    local d=$S/iscsi
    command -v tgtd >/dev/null || { log "iscsi: tgtd not installed (package tgt)"; return 1; }
    need_free_port "$ISCSI_PORT" iscsi || return 1
    mkdir -p "$d"
    truncate -s "$LUN_BYTES" "$d/lun-noauth.img" "$d/lun-chap.img" "$d/lun-reservations.img"
    [ -s "$d/chap.password" ] || randhex 16 >"$d/chap.password"
    # -f keeps tgtd in the foreground so its messages land in our log (it would use syslog);
    # -p only to put the state dir into its command line (that is how `down` recognises it).
    setsid tgtd -f -C "$TGT_CP" -p "$d/tgtd.pid.unused" --iscsi "portal=$HOST:$ISCSI_PORT" \
        >"$d/tgtd.log" 2>&1 </dev/null &
    echo $! >"$d/tgtd.pid"
    wait_for 10 TGTADM --op show --mode system || { log "iscsi: tgtd did not answer (see $d/tgtd.log)"; return 1; }
    TGTADM --op new --mode target --tid 1 -T "$ISCSI_IQN"
    TGTADM --op new --mode logicalunit --tid 1 --lun 1 -b "$d/lun-noauth.img"
    # A LUN of its own for reservations: one held there never fences another test's writes.
    TGTADM --op new --mode logicalunit --tid 1 --lun 2 -b "$d/lun-reservations.img"
    TGTADM --op bind --mode target --tid 1 -I ALL
    TGTADM --op new --mode target --tid 2 -T "$ISCSI_CHAP_IQN"
    TGTADM --op new --mode logicalunit --tid 2 --lun 1 -b "$d/lun-chap.img"
    TGTADM --op bind --mode target --tid 2 -I ALL
    TGTADM --op new --mode account --user "$ISCSI_CHAP_USER" --password "$(cat "$d/chap.password")"
    TGTADM --op bind --mode account --tid 2 --user "$ISCSI_CHAP_USER"
    wait_for 5 port_owned_by "$ISCSI_PORT" "$(pidfile_pid "$d/tgtd.pid")"
}

stop_iscsi() {
    local d=$S/iscsi pid
    pid=$(pidfile_pid "$d/tgtd.pid")
    if [ -n "$pid" ] && pid_ours "$pid"; then
        # tgtd ignores SIGTERM; ask it to quit (refused while targets exist, so drop them first)
        local t
        for t in 1 2; do timeout 5 tgtadm -C "$TGT_CP" --lld iscsi --op delete --mode target --tid $t --force >/dev/null 2>&1; done
        timeout 5 tgtadm -C "$TGT_CP" --lld iscsi --op delete --mode system >/dev/null 2>&1
        for _ in $(seq 30); do pid_ours "$pid" || break; sleep 0.1; done
        pid_ours "$pid" && kill -KILL "$pid" 2>/dev/null
        for _ in $(seq 20); do pid_ours "$pid" || break; sleep 0.1; done
        rm -f "/var/run/tgtd/socket.$TGT_CP" "/var/run/tgtd/socket.$TGT_CP.lock"
    fi
    rm -rf "$d"
}

env_iscsi() {
    kv VD_ISCSI_HOST "$HOST"
    kv VD_ISCSI_PORT "$ISCSI_PORT"
    kv VD_ISCSI_PORTAL "$HOST:$ISCSI_PORT"
    kv VD_ISCSI_IQN "$ISCSI_IQN"
    kv VD_ISCSI_LUN 1
    kv VD_ISCSI_PR_LUN 2
    kv VD_ISCSI_CHAP_IQN "$ISCSI_CHAP_IQN"
    kv VD_ISCSI_CHAP_LUN 1
    kv VD_ISCSI_CHAP_USER "$ISCSI_CHAP_USER"
    kv VD_ISCSI_CHAP_PASSWORD "$(cat "$S/iscsi/chap.password" 2>/dev/null)"
    kv VD_ISCSI_LUN_BYTES "$LUN_BYTES"
}

alive_iscsi() { pidfile_ours "$S/iscsi/tgtd.pid"; }
