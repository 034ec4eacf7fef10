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

ISCSI_PORT=${VD_ISCSI_PORT:-3260}
TGT_CP=${VD_TGT_CONTROL_PORT:-3260}      # names tgtd's control socket /var/run/tgtd/socket.N
ISCSI_IQN=iqn.2026-01.io.virtdriver:noauth
ISCSI_CHAP_IQN=iqn.2026-01.io.virtdriver:chap
ISCSI_CHAP_USER=vdchap
LUN_BYTES=$((64 * 1024 * 1024))         # every test disk (iSCSI LUNs, NBD, RBD, Gluster file)

NBD_PORT=${VD_NBD_PORT:-10809}
NBD_SHARED=${VD_NBD_SHARED:-16}
NBD_EXPORT=vdexport

CEPH_MON_PORT=${VD_CEPH_MON_PORT:-6789}     # msgr v1
CEPH_MON_V2_PORT=${VD_CEPH_MON_V2_PORT:-3300}
CEPH_POOL=volumes
CEPH_USER=volumes
CEPH_IMAGE=vdimage

GLUSTER_PORT=24007                          # glusterd; clients assume it
GLUSTER_VOLUME=vdvol
GLUSTER_IMAGE=vdimage.raw

log()  { printf 'test-backends: %s\n' "$*" >&2; }
die()  { log "$*"; exit 2; }
now()  { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------------------------------------
# process helpers: a pid is "ours" only if it is alive (not a zombie) and its command line
# names the state directory.
# ---------------------------------------------------------------------------------------------
pid_ours() {
    local pid=$1 st
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [ -r "/proc/$pid/stat" ] || return 1
    st=$(awk '{ sub(/^.*\) /, ""); print $1 }' "/proc/$pid/stat" 2>/dev/null) || return 1
    [ "$st" != Z ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$S/"
}
pidfile_ours() { [ -s "$1" ] && pid_ours "$(head -c 32 "$1" | tr -dc 0-9)"; }
pidfile_pid()  { head -c 32 "$1" 2>/dev/null | tr -dc 0-9; }

# stop_pids SIGNAL_WAIT_SECONDS PID...: TERM, wait, then KILL; only pids that are ours.
stop_pids() {
    local wait=$1; shift
    local p i live=()
    for p in "$@"; do pid_ours "$p" && live+=("$p"); done
    ((${#live[@]})) || return 0
    kill -TERM "${live[@]}" 2>/dev/null
    local end; end=$(awk -v s="$wait" 'BEGIN { print s * 10 }')
    for ((i = 0; i < end; i++)); do
        local any=0
        for p in "${live[@]}"; do pid_ours "$p" && any=1; done
        ((any)) || return 0
        sleep 0.1
    done
    for p in "${live[@]}"; do pid_ours "$p" && kill -KILL "$p" 2>/dev/null; done
    sleep 0.2
    return 0
}

# Pids of known daemon names whose command line names the state dir (safety net for `down`).
# Never QEMU guests or anything else that merely opened a file of ours.
our_daemon_pids() {
    local d pid comm
    for d in /proc/[0-9]*; do
        pid=${d#/proc/}
        comm=$(cat "$d/comm" 2>/dev/null) || continue
        case "$comm" in
            tgtd|qemu-nbd|ceph-mon|ceph-osd|glusterd|glusterfsd|glusterfs) ;;
            *) continue ;;
        esac
        pid_ours "$pid" && echo "$pid"
    done
}

# port_holder PORT: ss's users:(...) of whoever listens on PORT
port_listening() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }
port_holder() { ss -Hltnp "sport = :$1" 2>/dev/null | head -1 | grep -o 'users:.*' ; }
need_free_port() {
    if port_listening "$1"; then
        log "$2: port $1 already in use: $(port_holder "$1")"
        return 1
    fi
}
# port_owned_by PORT PID
port_owned_by() { ss -Hltnp "sport = :$1" 2>/dev/null | grep -q "pid=$2,"; }

wait_for() {  # wait_for SECONDS CMD...
    local t=$1 i; shift
    local end; end=$(awk -v s="$t" 'BEGIN { print s * 10 }')
    for ((i = 0; i < end; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    "$@" >/dev/null 2>&1
}

randhex() { od -An -N"$(($1 / 2))" -tx1 /dev/urandom | tr -d ' \n'; }  # randhex NCHARS
newuuid() { cat /proc/sys/kernel/random/uuid; }

# ---------------------------------------------------------------------------------------------
# packages
# ---------------------------------------------------------------------------------------------
pkgs_for() {
    case "$1" in
        iscsi)   echo tgt ;;
        nbd)     echo qemu-utils ;;
        ceph)    echo ceph-mon ceph-osd ceph-common python3-rados python3-rbd ;;
        gluster) echo glusterfs-server glusterfs-client ;;
    esac
}
ensure_packages() {  # ensure_packages BACKEND...; QEMU's block drivers are needed by every client
    [ "${VD_BACKENDS_NO_INSTALL:-0}" = 1 ] && return 0
    local want=(qemu-utils qemu-block-extra) missing=() p b
    for b in "$@"; do for p in $(pkgs_for "$b"); do want+=("$p"); done; done
    for p in "${want[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    local t0; t0=$(now)
    log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >"$S/apt.log" 2>&1 || log "apt-get update failed (see $S/apt.log)"
    if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$S/apt.log" 2>&1; then
        log "apt-get install failed (see $S/apt.log); backends whose packages are missing will fail"
    fi
    log "packages done in $(since "$t0")s"
}

# =============================================================================================
# iSCSI: tgtd
# =============================================================================================
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

# =============================================================================================
# NBD: qemu-nbd
# =============================================================================================
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

# =============================================================================================
# Ceph: one mon, one memstore OSD, cephx
# =============================================================================================
ceph_authtool_q() { ceph-authtool "$@" >/dev/null; }
CEPH() { timeout 30 ceph -c "$S/ceph/ceph.conf" --connect-timeout 15 "$@"; }
RBD()  { timeout 30 rbd -c "$S/ceph/ceph.conf" "$@"; }

check_ceph() {
    local d=$S/ceph
    pidfile_ours "$d/run/mon.a.pid" && pidfile_ours "$d/run/osd.0.pid" || return 1
    # as the test user: proves mon, cephx and the OSD (the header object lives there)
    timeout 10 rbd -c "$d/ceph.conf" --id "$CEPH_USER" info "$CEPH_POOL/$CEPH_IMAGE" >/dev/null 2>&1
}

start_ceph() {
    local d=$S/ceph
    local tool
    for tool in ceph-mon ceph-osd ceph-authtool monmaptool ceph rbd; do
        command -v $tool >/dev/null || { log "ceph: $tool not installed"; return 1; }
    done
    need_free_port "$CEPH_MON_PORT" ceph || return 1
    need_free_port "$CEPH_MON_V2_PORT" ceph || return 1
    rm -rf "$d"
    mkdir -p "$d"/{run,log,mon,osd/ceph-0}
    local fsid osd_uuid
    fsid=$(newuuid); osd_uuid=$(newuuid)
    cat >"$d/ceph.conf" <<EOF
[global]
fsid = $fsid
mon_host = [v2:$HOST:$CEPH_MON_V2_PORT,v1:$HOST:$CEPH_MON_PORT]
public_addr = $HOST
public_bind_addr = $HOST
cluster_addr = $HOST
public_network = 127.0.0.0/8
cluster_network = 127.0.0.0/8
ms_bind_ipv6 = false
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
run_dir = $d/run
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
auth_allow_insecure_global_id_reclaim = false
# one mon, nothing to wait for: commit map changes at once (pool create etc. ~0.2 s, not ~1 s)
paxos_propose_interval = 0.05
paxos_min_wait = 0.01

[client]
keyring = $d/ceph.\$name.keyring

[mon]
mon_data = $d/mon/\$cluster-\$id
mon_initial_members = a
mon_cluster_log_file = default=$d/log/\$cluster.\$channel.log cluster=$d/log/\$cluster.log
log_file = $d/log/\$name.log
admin_socket = $d/run/\$name.asok
pid_file = $d/run/\$name.pid

[osd]
osd_data = $d/osd/\$cluster-\$id
keyring = $d/osd/\$cluster-\$id/keyring
osd_objectstore = memstore
memstore_device_bytes = 1073741824
log_file = $d/log/\$name.log
admin_socket = $d/run/\$name.asok
pid_file = $d/run/\$name.pid
EOF
    # every key is made up front and put into the mon's initial keyring: no auth round trips later
    local K=ceph_authtool_q
    $K "$d/mon.keyring" --create-keyring --gen-key -n mon. --cap mon 'allow *'
    $K "$d/ceph.client.admin.keyring" --create-keyring --gen-key -n client.admin \
        --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *'
    $K "$d/ceph.client.$CEPH_USER.keyring" --create-keyring --gen-key -n "client.$CEPH_USER" \
        --cap mon 'profile rbd' --cap osd "profile rbd pool=$CEPH_POOL"
    $K "$d/osd/ceph-0/keyring" --create-keyring --gen-key -n osd.0 \
        --cap mon 'allow profile osd' --cap osd 'allow *' --cap mgr 'allow profile osd'
    $K "$d/mon.keyring" --import-keyring "$d/ceph.client.admin.keyring" >/dev/null
    $K "$d/mon.keyring" --import-keyring "$d/ceph.client.$CEPH_USER.keyring" >/dev/null
    $K "$d/mon.keyring" --import-keyring "$d/osd/ceph-0/keyring" >/dev/null
    monmaptool --create --clobber --fsid "$fsid" \
        --addv a "[v2:$HOST:$CEPH_MON_V2_PORT,v1:$HOST:$CEPH_MON_PORT]" "$d/monmap" >/dev/null
    ceph-mon -c "$d/ceph.conf" -i a --mkfs --monmap "$d/monmap" --keyring "$d/mon.keyring" \
        >"$d/log/mkfs-mon.log" 2>&1 || { log "ceph: mon mkfs failed: $(tail -3 "$d/log/mkfs-mon.log")"; return 1; }
    ceph-mon -c "$d/ceph.conf" -i a >"$d/log/mon-start.log" 2>&1 ||
        { log "ceph: ceph-mon failed: $(tail -3 "$d/log/mon-start.log")"; return 1; }
    CEPH osd new "$osd_uuid" 0 >/dev/null
    ceph-osd -c "$d/ceph.conf" -i 0 --mkfs --osd-uuid "$osd_uuid" >"$d/log/mkfs-osd.log" 2>&1 ||
        { log "ceph: osd mkfs failed: $(tail -3 "$d/log/mkfs-osd.log")"; return 1; }
    ceph-osd -c "$d/ceph.conf" -i 0 >"$d/log/osd-start.log" 2>&1 ||
        { log "ceph: ceph-osd failed: $(tail -3 "$d/log/osd-start.log")"; return 1; }
    CEPH osd pool create "$CEPH_POOL" 8 8 replicated >/dev/null 2>&1
    CEPH osd pool application enable "$CEPH_POOL" rbd >/dev/null 2>&1
    # created by the test user itself, which also proves its caps; blocks until the PGs are active
    RBD --id "$CEPH_USER" create --size "$((LUN_BYTES / 1048576))M" "$CEPH_POOL/$CEPH_IMAGE"
    check_ceph
}

stop_ceph() {
    local d=$S/ceph
    [ -d "$d" ] || return 0
    # memstore would dump its contents to disk on SIGTERM; the data is thrown away anyway
    local osd mon
    osd=$(pidfile_pid "$d/run/osd.0.pid"); mon=$(pidfile_pid "$d/run/mon.a.pid")
    [ -n "$osd" ] && pid_ours "$osd" && kill -KILL "$osd" 2>/dev/null
    [ -n "$mon" ] && stop_pids 5 "$mon"
    for _ in $(seq 20); do { [ -n "$osd" ] && pid_ours "$osd"; } || break; sleep 0.1; done
    rm -rf "$d"
}

env_ceph() {
    local d=$S/ceph key
    key=$(ceph-authtool -p -n "client.$CEPH_USER" "$d/ceph.client.$CEPH_USER.keyring" 2>/dev/null)
    kv VD_CEPH_CONF "$d/ceph.conf"
    kv VD_CEPH_MON_HOST "$HOST"
    kv VD_CEPH_MON_PORT "$CEPH_MON_PORT"
    kv VD_CEPH_MON_ADDR "$HOST:$CEPH_MON_PORT"
    kv VD_CEPH_USER "$CEPH_USER"
    kv VD_CEPH_CLIENT_NAME "client.$CEPH_USER"
    kv VD_CEPH_CLIENT_KEY "$key"
    kv VD_CEPH_KEYRING "$d/ceph.client.$CEPH_USER.keyring"
    kv VD_CEPH_ADMIN_KEYRING "$d/ceph.client.admin.keyring"
    kv VD_CEPH_POOL "$CEPH_POOL"
    kv VD_CEPH_IMAGE "$CEPH_IMAGE"
    kv VD_CEPH_IMAGE_BYTES "$LUN_BYTES"
}

# =============================================================================================
# Gluster: glusterd + one brick, everything but its unix sockets under $S/gluster
# =============================================================================================
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

# unmount everything below $S, deepest first
umount_below_state() {
    local m
    awk -v p="$S/" 'index($2, p) == 1 { print length($2), $2 }' /proc/mounts | sort -rn | cut -d' ' -f2- |
        while read -r m; do
            m=$(printf '%b' "$m")   # /proc/mounts escapes spaces as \040
            umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
        done
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

# =============================================================================================
# commands
# =============================================================================================
kv() {
    local v=$2
    [[ $v =~ ^[A-Za-z0-9_.:/+=@,%-]*$ ]] || v=$(printf '%q' "$v")
    printf 'export %s=%s\n' "$1" "$v"
}

# quick liveness (no protocol round trip) for `env`
alive() {
    case "$1" in
        iscsi)   pidfile_ours "$S/iscsi/tgtd.pid" ;;
        nbd)     pidfile_ours "$S/nbd/qemu-nbd.pid" ;;
        ceph)    pidfile_ours "$S/ceph/run/mon.a.pid" && pidfile_ours "$S/ceph/run/osd.0.pid" ;;
        gluster) pidfile_ours "$S/gluster/run/glusterd.pid" ;;
    esac
}

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
