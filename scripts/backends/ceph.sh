# shellcheck shell=bash
# Ceph: one mon + one memstore OSD, cephx, pool `volumes`, user client.volumes, one RBD image.
# (one backend of scripts/test-backends.sh; the contract: scripts/backends/lib.sh)

CEPH_MON_PORT=${VD_CEPH_MON_PORT:-6789}     # msgr v1
CEPH_MON_V2_PORT=${VD_CEPH_MON_V2_PORT:-3300}
CEPH_POOL=volumes
CEPH_USER=volumes
CEPH_IMAGE=vdimage

ceph_PACKAGES="ceph-mon ceph-osd ceph-common python3-rados python3-rbd"

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
# a public_bind_addr without ports would bind Ceph's default ones (3300, 6789), whatever the
# monmap says: the mon binds the monmap's addresses, with our ports
public_bind_addr =
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

alive_ceph() { pidfile_ours "$S/ceph/run/mon.a.pid" && pidfile_ours "$S/ceph/run/osd.0.pid"; }
