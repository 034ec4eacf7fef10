# shellcheck shell=bash
# NBD: qemu-nbd --shared --persistent on 127.0.0.1, one named export.
# (one backend of scripts/test-backends.sh; the contract: scripts/backends/lib.sh)

NBD_PORT=${VD_NBD_PORT:-10809}
NBD_SHARED=${VD_NBD_SHARED:-16}
NBD_EXPORT=vdexport

nbd_PACKAGES="qemu-utils"

check_nbd() {
    local d=$S/nbd
    pidfile_ours "$d/qemu-nbd.pid" && port_owned_by "$NBD_PORT" "$(pidfile_pid "$d/qemu-nbd.pid")"
}

start_nbd() {
    local d=$S/nbd
    command -v qemu-nbd >/dev/null || { log "nbd: qemu-nbd not installed (package qemu-utils)"; return 1; }
    need_free_port "$NBD_PORT" nbd || return 1
    mkdir -p "$d"
    truncate -s "$LUN_BYTES" "$d/disk.raw"
    # --shared: the default of one client makes a second client hang in the handshake
    qemu-nbd --fork --pid-file="$d/qemu-nbd.pid" --format=raw --export-name="$NBD_EXPORT" \
        --bind="$HOST" --port="$NBD_PORT" --shared="$NBD_SHARED" --persistent --cache=none \
        "$d/disk.raw" >"$d/qemu-nbd.log" 2>&1 || { log "nbd: qemu-nbd failed: $(tail -3 "$d/qemu-nbd.log")"; return 1; }
    wait_for 5 check_nbd
}

stop_nbd() {
    local d=$S/nbd
    [ -f "$d/qemu-nbd.pid" ] && stop_pids 5 "$(pidfile_pid "$d/qemu-nbd.pid")"
    rm -rf "$d"
}

env_nbd() {
    kv VD_NBD_HOST "$HOST"
    kv VD_NBD_PORT "$NBD_PORT"
    kv VD_NBD_EXPORT "$NBD_EXPORT"
    kv VD_NBD_SHARED "$NBD_SHARED"
    kv VD_NBD_URL "nbd://$HOST:$NBD_PORT/$NBD_EXPORT"
    kv VD_NBD_BYTES "$LUN_BYTES"
}

alive_nbd() { pidfile_ours "$S/nbd/qemu-nbd.pid"; }
