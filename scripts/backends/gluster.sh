# shellcheck shell=bash
# Gluster: glusterd + one brick, volume `vdvol`, FUSE-mountable (127.0.0.1:/vdvol) and gluster://;
# everything but its unix sockets under $S/gluster.
# (one backend of scripts/test-backends.sh; the contract: scripts/backends/lib.sh)

GLUSTER_PORT=24007                          # glusterd; clients assume it
GLUSTER_VOLUME=vdvol
GLUSTER_IMAGE=vdimage.raw

gluster_PACKAGES="glusterfs-server glusterfs-client"

GL() { timeout 60 gluster --mode=script --glusterd-sock="$S/gluster/run/glusterd.socket" \
        --log-file="$S/gluster/log/cli.log" "$@"; }

# gluster refuses 127.0.0.1 / localhost as a brick host even with `force`; it needs a name that
# resolves to a loopback address (here the hostname).  Clients still use 127.0.0.1 for the volfile.
gluster_brick_host() {
    local h=${VD_GLUSTER_BRICK_HOST:-$(hostname)} a
    a=$(getent ahostsv4 "$h" 2>/dev/null | awk 'NR == 1 { print $1 }')
    case "$a" in
        127.*) echo "$h" ;;
        *) log "gluster: brick host '$h' resolves to '${a:-nothing}', need a loopback address (set VD_GLUSTER_BRICK_HOST)"; return 1 ;;
    esac
}

gluster_brick_pids() {
    local f
    for f in "$S"/gluster/run/vols/*/*.pid; do [ -f "$f" ] && pidfile_pid "$f" && echo; done | grep .
}

check_gluster() {
    local d=$S/gluster p ok=0
    pidfile_ours "$d/run/glusterd.pid" || return 1
    port_owned_by "$GLUSTER_PORT" "$(pidfile_pid "$d/run/glusterd.pid")" || return 1
    for p in $(gluster_brick_pids); do pid_ours "$p" && ok=1; done
    ((ok)) || return 1
    GL volume info "$GLUSTER_VOLUME" 2>/dev/null | grep -q '^Status: Started'
}

start_gluster() {
    local d=$S/gluster bh
    command -v glusterd >/dev/null || { log "gluster: glusterd not installed (package glusterfs-server)"; return 1; }
    bh=$(gluster_brick_host) || return 1
    need_free_port "$GLUSTER_PORT" gluster || return 1
    rm -rf "$d/work" "$d/run" "$d/brick"
    mkdir -p "$d"/{work,run,log,brick,mnt}
    cat >"$d/glusterd.vol" <<EOF
volume management
    type mgmt/glusterd
    option working-directory $d/work
    option run-directory $d/run
    option logging-directory $d/log
    option glusterd-sockfile $d/run/glusterd.socket
    option transport-type socket
    option transport.address-family inet
    option transport.socket.bind-address $HOST
    option transport.socket.listen-port $GLUSTER_PORT
    option transport.socket.keepalive-time 10
    option transport.socket.keepalive-interval 2
    option transport.socket.read-fail-log off
    option ping-timeout 0
    option event-threads 1
    option base-port 49152
    option max-port 49407
end-volume
EOF
    glusterd -f "$d/glusterd.vol" -p "$d/run/glusterd.pid" -l "$d/log/glusterd.log" \
        >"$d/log/glusterd.out" 2>&1 </dev/null ||
        { log "gluster: glusterd failed (see $d/log/glusterd.log)"; return 1; }
    wait_for 20 GL volume list || { log "gluster: glusterd did not answer (see $d/log/glusterd.log)"; return 1; }
    GL volume create "$GLUSTER_VOLUME" "$bh:$d/brick" force >/dev/null
    GL volume start "$GLUSTER_VOLUME" >/dev/null
    wait_for 10 check_gluster || { log "gluster: brick did not come up (see $d/log/bricks/)"; return 1; }

    # $d/mnt is the tests' mount base (os-brick's mount_point_base). Making it a shared mount, so
    # that FUSE mounts reach the guests' QEMU namespaces, is the driver's job, not this script's.
    # Probe FUSE once and create the test image through it (never write into a brick directly).
    local probe=$d/probe
    mkdir -p "$probe"
    echo 0 >"$d/fuse.ok"
    if [ ! -c /dev/fuse ]; then
        log "gluster: /dev/fuse missing, FUSE mounts will not work (gluster:// still does)"
    elif timeout 30 mount -t glusterfs -o "log-file=$d/log/probe-mount.log" "$HOST:/$GLUSTER_VOLUME" "$probe" \
            >"$d/log/probe-mount.err" 2>&1 </dev/null; then
        if truncate -s "$LUN_BYTES" "$probe/$GLUSTER_IMAGE" && [ -f "$probe/$GLUSTER_IMAGE" ]; then
            echo 1 >"$d/fuse.ok"
        fi
        umount "$probe" || umount -l "$probe"
    else
        log "gluster: FUSE mount failed: $(cat "$d/log/probe-mount.err") (see $d/log/probe-mount.log)"
    fi
    rmdir "$probe" 2>/dev/null
    return 0
}

stop_gluster() {
    local d=$S/gluster pids=() p sock
    [ -d "$d" ] || return 0
    umount_below_state
    for p in $(gluster_brick_pids); do
        pid_ours "$p" || continue
        pids+=("$p")
        sock=$(tr '\0' '\n' <"/proc/$p/cmdline" | awk 'prev == "-S" { print; exit } { prev = $0 }')
        [ -n "$sock" ] && echo "$sock" >>"$d/sockets"
    done
    p=$(pidfile_pid "$d/run/glusterd.pid"); [ -n "$p" ] && pids+=("$p")
    ((${#pids[@]})) && stop_pids 5 "${pids[@]}"
    if [ -f "$d/sockets" ]; then
        while read -r sock; do case "$sock" in /var/run/gluster/*.socket|/run/gluster/*.socket) rm -f "$sock" ;; esac; done <"$d/sockets"
    fi
    rm -rf "$d"
}

env_gluster() {
    kv VD_GLUSTER_HOST "$HOST"
    kv VD_GLUSTER_PORT "$GLUSTER_PORT"
    kv VD_GLUSTER_VOLUME "$GLUSTER_VOLUME"
    kv VD_GLUSTER_SHARE "$HOST:/$GLUSTER_VOLUME"
    kv VD_GLUSTER_IMAGE "$GLUSTER_IMAGE"
    kv VD_GLUSTER_URL "gluster://$HOST/$GLUSTER_VOLUME/$GLUSTER_IMAGE"
    kv VD_GLUSTER_FUSE "$(cat "$S/gluster/fuse.ok" 2>/dev/null || echo 0)"
    kv VD_GLUSTER_MOUNT_BASE "$S/gluster/mnt"
}

alive_gluster() { pidfile_ours "$S/gluster/run/glusterd.pid"; }
