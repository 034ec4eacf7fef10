#!/usr/bin/env bash
# A small real OpenStack on this host: scripts/test-openstack.sh up|down|status|env
#
# keystone 30, placement 16, nova 34 (api, conductor, scheduler, compute), glance 33 (file store),
# neutron 29 (ML2, no agents), Cinder 29 (testhosts/cinder/launcher.py, keystone auth, RBD on a
# second test Ceph of its own), from PyPI in one venv; MariaDB and RabbitMQ from Debian, each a
# private instance. All plain processes on 127.0.0.1; the web services under gunicorn.
# nova-compute runs on the host's libvirtd (qemu:///system) with
# `compute_driver = virtdriver.nova.LibvirtDriver`, virtdriver installed as docs/nova.md says (a
# wheel built from this checkout, pip install into nova's venv).
#
# Cached by their inputs (a fresh machine builds them, a second `up` reuses them):
#   /var/tmp/virtdriver-openstack-venv-KEY   KEY: testhosts/openstack/requirements.txt + build-venv.sh
#   /var/tmp/virtdriver-openstack-db-KEY     MariaDB datadir with every schema synced, keystone
#                                            bootstrapped, the cells mapped; KEY: the venv's key,
#                                            the functions that build it, the ports and the state dir
# State (configs, logs, pids, the running datadir, instances, the second Ceph) under $S;
# `down` stops everything of ours, removes nova's guests (domains whose uuid is in our nova
# database) and $S. `status` is cheap (pid files and TCP connects).
# Measured here (2 cores): cold up 173 s on a fresh machine (apt, the venv 45 s, the databases
# 54 s); warm 29-36 s (venv and databases cached), 87-95 s when the databases are built anew.
#
# `env` prints `export KEY=VALUE` lines (eval "$(scripts/test-openstack.sh env)"):
#   VD_OS_UP                    1 when every service answers, else 0 (the rest is printed anyway)
#   OS_AUTH_URL OS_IDENTITY_API_VERSION OS_USERNAME OS_PASSWORD OS_PROJECT_NAME
#   OS_USER_DOMAIN_NAME OS_PROJECT_DOMAIN_NAME OS_REGION_NAME OS_INTERFACE     (the admin user)
#   OS_CLIENT_CONFIG_FILE       a clouds.yaml with clouds vd-admin, vd-demo, vd-alt
#   VD_OS_ADMIN_USERNAME VD_OS_ADMIN_PASSWORD VD_OS_ADMIN_PROJECT_NAME    (role admin)
#   VD_OS_DEMO_USERNAME  VD_OS_DEMO_PASSWORD  VD_OS_DEMO_PROJECT_NAME     (role member)
#   VD_OS_ALT_USERNAME   VD_OS_ALT_PASSWORD   VD_OS_ALT_PROJECT_NAME      (role member, 2nd project)
#   VD_OS_DOMAIN_NAME           Default
#   VD_OS_IMAGE_ID VD_OS_IMAGE_NAME   OS-less raw image (1 MiB), os_shutdown_timeout=0, hw_disk_bus=scsi,
#                               hw_scsi_model=virtio-scsi (an OS-less guest releases SCSI disks)
#   VD_OS_FLAVOR_ID VD_OS_FLAVOR_ALT_ID   vd.tiny (1 vCPU, 128 MiB, 1 GB), vd.small (1, 192 MiB, 2 GB)
#   VD_OS_MULTIATTACH_VOLUME_TYPE  volume type with multiattach="<is> True" (RBD)
#   VD_OS_VOLUME_TYPE           the default volume type (RBD, not multiattach)
#   VD_OS_KEYSTONE_URL VD_OS_NOVA_URL VD_OS_PLACEMENT_URL VD_OS_GLANCE_URL VD_OS_CINDER_URL
#   VD_OS_NEUTRON_URL           service endpoints (also in keystone's catalog, region RegionOne)
#   VD_OS_NEUTRON               real (neutron-server) | standin
#   VD_OS_COMPUTE_HOST VD_OS_LIBVIRT_URI   nova-compute's host name; qemu:///system
#   VD_OS_PYTHON                the venv's python (openstacksdk, novaclient, keystoneauth1 in it)
#   VD_OS_DIR VD_OS_LOG_DIR     state dir, logs
#   VD_OS_CEPH_CONF VD_OS_CEPH_POOL   the Ceph and pool of Cinder's RBD backend
#
# Overridable: VD_OS_DIR, VD_OS_NO_COMPUTE=1 (everything but nova-compute and the libvirt secret)
set -Eeuo pipefail
trap 'log "failed at line $LINENO: $BASH_COMMAND"' ERR
export LC_ALL=C
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
T=$here/testhosts/openstack
S=${VD_OS_DIR:-/var/tmp/virtdriver-openstack-state}
S=${S%/}
KEY=$(cat "$T/requirements.txt" "$T/build-venv.sh" | sha256sum | cut -c1-12)
VENV=/var/tmp/virtdriver-openstack-venv-$KEY
PY=$VENV/bin/python
SITE=$VENV/lib/python3.11/site-packages
HOST=127.0.0.1
P_KEYSTONE=18500 P_PLACEMENT=18578 P_NOVA=18774 P_GLANCE=18292 P_NEUTRON=18696 P_CINDER=18777
P_MYSQL=18306 P_RABBIT=18672 P_RABBIT_DIST=18673 P_EPMD=18669
P_CEPH=18789 P_CEPH_V2=18300
COMPUTE_HOST=vd-os-compute
CEPH_SECRET_UUID=0d6e3f52-7a41-4c8e-9b1d-5f2a6c7e8d90   # libvirt secret of our Cinder's cephx user
REGION=RegionOne
# nova-compute's driver: virtdriver's, or nova's own for the comparison (tempest/run.sh nova)
DRIVER=${VD_OS_COMPUTE_DRIVER:-virtdriver.nova.LibvirtDriver}
CEPH_DIR=$S/backends     # the second Ceph's state (VIRTDRIVER_BACKENDS_DIR of test-backends.sh)

log() { printf 'test-openstack: %s\n' "$*" >&2; }
# privsep_sections CONF SECTION...: each privsep context's helper is the venv's, reading CONF
privsep_sections() {
    local c
    for c in "${@:2}"; do printf '[%s]\nhelper_command = %s --config-file %s\n' "$c" "$VENV/bin/privsep-helper" "$1"; done
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------------------------------------
# processes: each service in its own session (pgid = pid), pid in $S/run/NAME.pid
# ---------------------------------------------------------------------------------------------
pid_of() { [ -s "$S/run/$1.pid" ] && head -c 16 "$S/run/$1.pid" | tr -dc 0-9; }
alive() {  # alive NAME: its pid runs and its command line or environment names $S
    local p; p=$(pid_of "$1") || return 1
    [ -n "$p" ] && [ -r "/proc/$p/cmdline" ] || return 1
    # gunicorn renames itself "gunicorn: master [vd-os-NAME]"
    tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -qF -e "$S/" -e "[vd-os-$1]" ||
        tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qF "$S/"
}
port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }
port_free() { ! ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }
start() {  # start NAME CMD...: detached, own session, output to $S/log/NAME.out
    setsid "${@:2}" >"$S/log/$1.out" 2>&1 </dev/null 8>&- &
    echo $! >"$S/run/$1.pid"
}
stop() {  # stop NAME...: TERM their process groups together, wait up to 10 s, KILL what is left
    local n p i left pids=()
    for n in "$@"; do
        p=$(pid_of "$n") || continue
        if [ -n "$p" ] && alive "$n"; then
            kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true
            pids+=("$p")
        fi
    done
    for ((i = 0; i < 100; i++)); do
        left=0
        for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && left=1; done
        ((left)) || break
        sleep 0.1
    done
    for p in "${pids[@]}"; do kill -KILL -- "-$p" 2>/dev/null || true; done
    for n in "$@"; do rm -f "$S/run/$n.pid"; done
}
wait_port() {  # wait_port NAME PORT SECONDS
    local i
    for ((i = 0; i < $3 * 5; i++)); do
        port_open "$2" && return 0
        alive "$1" || { log "$1 died: $(tail -5 "$S/log/$1.out" 2>/dev/null | tr '\n' ' ')"; return 1; }
        sleep 0.2
    done
    log "$1 did not listen on $2 within $3 s"; return 1
}
# wait_http NAME URL SECONDS: until the URL answers at all (any HTTP status)
wait_http() {
    local i
    for ((i = 0; i < $3 * 4; i++)); do
        "$PY" -c 'import sys, requests; requests.get(sys.argv[1], timeout=2)' "$2" 2>/dev/null && return 0
        alive "$1" || { log "$1 died: $(tail -5 "$S/log/$1.out" 2>/dev/null | tr '\n' ' ')"; return 1; }
        sleep 0.25
    done
    log "$1 did not answer $2 within $3 s"; return 1
}
gunicorn_() {  # gunicorn_ NAME PORT APP [env...]: one worker, threads
    local name=$1 port=$2 app=$3; shift 3
    start "$name" env "$@" "$VENV/bin/gunicorn" --bind "$HOST:$port" --workers 1 --threads 8 \
        --timeout 300 --graceful-timeout 5 --name "vd-os-$name" --pid "$S/run/$name.gunicorn.pid" \
        --error-logfile "$S/log/$name.log" --pythonpath "$T" "wsgi_app:$app"
}

# ---------------------------------------------------------------------------------------------
# the venv (cached by KEY) and virtdriver in it, as docs/nova.md tells an operator
# ---------------------------------------------------------------------------------------------
build_venv() {
    [ -x "$PY" ] && [ -e "$VENV/.complete" ] && return 0
    local t; t=$(now)
    local p missing=()
    for p in python3-rados python3-rbd; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}" || return 1
    log "building $VENV (pip, a few minutes)"
    "$T/build-venv.sh" "$VENV" || { log "venv build failed"; return 1; }
    log "venv built in $(since "$t")s"
    drop_other_keys "$VENV"
}
drop_other_keys() {  # drop_other_keys PATH-KEY: the caches of older inputs (PATH-*) go
    local d
    for d in "${1%-*}"-*; do
        [ "$d" = "$1" ] || [ ! -d "$d" ] || { rm -rf "$d"; log "removed the older cache $d"; }
    done
}
apt_install() {  # the CI's setup may hold apt's lock for a while: retry
    local i
    for i in $(seq 30); do
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$@" \
            >>"$S/log/apt.log" 2>&1 && return 0
        ((i == 1)) && apt-get -o DPkg::Lock::Timeout=600 update -qq >>"$S/log/apt.log" 2>&1
        sleep 5
    done
    log "apt-get -o DPkg::Lock::Timeout=600 install $* failed (see $S/log/apt.log)"; return 1
}
install_virtdriver() {
    # the checkout's content decides whether the installed wheel is current
    local h; h=$(cd "$here" && find pyproject.toml virtdriver nova_namespace -name '__pycache__' -prune -o -type f -print |
        LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
    [ "$(cat "$VENV/.virtdriver-installed" 2>/dev/null)" = "$h" ] && return 0
    local t; t=$(now)
    rm -rf "$S/wheel" && mkdir -p "$S/wheel"
    "$PY" -m pip wheel -q --no-deps -w "$S/wheel" "$here" >"$S/log/wheel.log" 2>&1 ||
        { log "virtdriver wheel failed: $(tail -3 "$S/log/wheel.log")"; return 1; }
    local whl; whl=$(ls "$S"/wheel/virtdriver-*.whl)
    "$PY" -m pip uninstall -q -y virtdriver >/dev/null 2>&1 || true
    "$PY" -m pip install -q "$whl[nova]" >>"$S/log/wheel.log" 2>&1 ||
        { log "pip install virtdriver[nova] failed: $(tail -3 "$S/log/wheel.log")"; return 1; }
    "$PY" -c 'import nova.virt.virtdriver.nova, virtdriver.nova' || return 1
    echo "$h" >"$VENV/.virtdriver-installed"
    log "virtdriver wheel installed into nova's venv in $(since "$t")s"
}

# ---------------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------------
db() { echo "mysql+pymysql://vd:$DB_PW@$HOST:$P_MYSQL/$1?charset=utf8"; }
authtoken() {  # [keystone_authtoken] for service user $1
    cat <<CONF
[keystone_authtoken]
www_authenticate_uri = http://$HOST:$P_KEYSTONE/v3
auth_url = http://$HOST:$P_KEYSTONE/v3
auth_type = password
username = $1
password = $SERVICE_PW
project_name = service
user_domain_name = Default
project_domain_name = Default
region_name = $REGION
service_token_roles_required = true
service_token_roles = service
CONF
}
client_auth() {  # a [section] of keystoneauth options for service user $2
    cat <<CONF
[$1]
auth_url = http://$HOST:$P_KEYSTONE/v3
auth_type = password
username = $2
password = $SERVICE_PW
project_name = service
user_domain_name = Default
project_domain_name = Default
region_name = $REGION
CONF
}
write_confs() {
    mkdir -p "$S"/etc/{keystone,nova,placement,glance,neutron/plugins/ml2,cinder} "$S/locks"
    local rabbit="rabbit://guest:guest@$HOST:$P_RABBIT/"
    cat >"$S/etc/keystone/keystone.conf" <<CONF
[database]
connection = $(db keystone)
[token]
provider = fernet
[fernet_tokens]
key_repository = $S/keystone/fernet-keys
[fernet_receipts]
key_repository = $S/keystone/fernet-keys
[credential]
key_repository = $S/keystone/credential-keys
CONF
    {
        cat <<CONF
[placement_database]
connection = $(db placement)
[api]
auth_strategy = keystone
CONF
        authtoken placement
    } >"$S/etc/placement/placement.conf"
    {
        cat <<CONF
[DEFAULT]
enabled_backends = file:file
worker_self_reference_url = http://$HOST:$P_GLANCE
[database]
connection = $(db glance)
[paste_deploy]
flavor = keystone
config_file = $VENV/etc/glance/glance-api-paste.ini
[glance_store]
default_backend = file
[file]
filesystem_store_datadir = $S/glance/images
[os_glance_staging_store]
filesystem_store_datadir = $S/glance/staging
[os_glance_tasks_store]
filesystem_store_datadir = $S/glance/tasks
[oslo_concurrency]
lock_path = $S/locks
CONF
        authtoken glance
    } >"$S/etc/glance/glance-api.conf"
    {
        cat <<CONF
[DEFAULT]
core_plugin = ml2
service_plugins =
auth_strategy = keystone
transport_url = $rabbit
api_paste_config = $VENV/etc/neutron/api-paste.ini
rpc_workers = 0
rpc_state_report_workers = 0
notify_nova_on_port_status_changes = false
notify_nova_on_port_data_changes = false
state_path = $S/neutron
[database]
connection = $(db neutron)
[oslo_concurrency]
lock_path = $S/locks
CONF
        authtoken neutron
        client_auth nova neutron
    } >"$S/etc/neutron/neutron.conf"
    cat >"$S/etc/neutron/plugins/ml2/ml2_conf.ini" <<CONF
[ml2]
type_drivers = flat,vlan
tenant_network_types =
mechanism_drivers =
extension_drivers = port_security
[ml2_type_flat]
flat_networks = *
CONF
    {
        cat <<CONF
[DEFAULT]
host = $COMPUTE_HOST
my_ip = $HOST
state_path = $S/nova/state
instances_path = $S/nova/instances
transport_url = $rabbit
compute_driver = $DRIVER
allow_resize_to_same_host = true
vif_plugging_is_fatal = false
vif_plugging_timeout = 0
[api]
auth_strategy = keystone
[wsgi]
api_paste_config = $S/etc/nova/api-paste.ini
[api_database]
connection = $(db nova_api)
[database]
connection = $(db nova_cell1)
[scheduler]
discover_hosts_in_cells_interval = 2
workers = 1
[conductor]
workers = 1
[libvirt]
virt_type = kvm
connection_uri = qemu:///system
cpu_mode = none
$(privsep_sections "$S/etc/nova/nova.conf" privsep nova_sys_admin privsep_osbrick)
[oslo_concurrency]
lock_path = $S/locks
[oslo_messaging_notifications]
driver = noop
[cinder]
catalog_info = volumev3::publicURL
os_region_name = $REGION
auth_url = http://$HOST:$P_KEYSTONE/v3
auth_type = password
username = nova
password = $SERVICE_PW
project_name = service
user_domain_name = Default
project_domain_name = Default
[service_user]
send_service_user_token = true
CONF
        client_auth service_user nova | tail -n +2
        authtoken nova
        client_auth placement nova
        client_auth neutron nova
        echo "[glance]"; echo "region_name = $REGION"
    } >"$S/etc/nova/nova.conf"
    cp "$VENV/etc/nova/api-paste.ini" "$S/etc/nova/"   # nova's WSGI app reads it beside nova.conf
    {
        cat <<CONF
[DEFAULT]
transport_url = fake:/
auth_strategy = keystone
osapi_volume_listen = $HOST
osapi_volume_listen_port = $P_CINDER
osapi_volume_workers = 1
my_ip = $HOST
host = vd-os-cinder
state_path = $S/cinder/state
api_paste_config = $VENV/etc/cinder/api-paste.ini
resource_query_filters_file = $VENV/etc/cinder/resource_filters.json
enabled_backends = ceph
default_volume_type = vd-rbd
scheduler_driver_init_wait_time = 1
report_interval = 2
periodic_interval = 10
log_file = $S/log/cinder.log
[database]
connection = $(db cinder)
$(privsep_sections "$S/etc/cinder/cinder.conf" cinder_sys_admin privsep_osbrick)
[oslo_concurrency]
lock_path = $S/locks
[coordination]
backend_url = file://$S/locks
[ceph]
volume_driver = cinder.volume.drivers.rbd.RBDDriver
volume_backend_name = ceph
rbd_pool = volumes
rbd_user = volumes
rbd_ceph_conf = $CEPH_DIR/ceph/ceph.conf
rbd_secret_uuid = $CEPH_SECRET_UUID
rbd_flatten_volume_from_snapshot = false
CONF
        authtoken cinder
        client_auth nova cinder
        echo "interface = public"
        client_auth service_user cinder
        echo "send_service_user_token = true"
    } >"$S/etc/cinder/cinder.conf"
    write_clouds
}
write_clouds() {
    local c
    {
        echo "clouds:"
        for c in "vd-admin admin $ADMIN_PW admin" "vd-demo demo $DEMO_PW demo" "vd-alt alt_demo $ALT_PW alt_demo"; do
            set -- $c
            cat <<YAML
  $1:
    region_name: $REGION
    identity_api_version: 3
    auth:
      auth_url: http://$HOST:$P_KEYSTONE/v3
      username: $2
      password: $3
      project_name: $4
      user_domain_name: Default
      project_domain_name: Default
YAML
        done
    } >"$S/clouds.yaml"
    chmod 600 "$S/clouds.yaml"
}

# ---------------------------------------------------------------------------------------------
# MariaDB and RabbitMQ, private instances
# ---------------------------------------------------------------------------------------------
SQL() { mariadb --no-defaults -S "$S/mysql/mysqld.sock" -u root "$@"; }
mysql_start() {
    alive mariadb && port_open $P_MYSQL && return 0
    port_free $P_MYSQL || { log "port $P_MYSQL is taken: $(ss -Hltnp "sport = :$P_MYSQL")"; return 1; }
    mkdir -p "$S/mysql/tmp"
    start mariadb /usr/sbin/mariadbd --no-defaults --datadir="$S/mysql/data" \
        --socket="$S/mysql/mysqld.sock" --port=$P_MYSQL --bind-address=$HOST --user=root \
        --pid-file="$S/mysql/mariadbd.pid" --log-error="$S/log/mariadb.log" --tmpdir="$S/mysql/tmp" \
        --skip-log-bin --skip-name-resolve --max-connections=1000 --innodb-buffer-pool-size=128M \
        --innodb-flush-log-at-trx-commit=2 --character-set-server=utf8mb4 \
        --collation-server=utf8mb4_general_ci
    wait_port mariadb $P_MYSQL 60
}
mysql_stop() {
    if alive mariadb; then SQL -e 'SHUTDOWN' >/dev/null 2>&1 || true; fi
    local i; for i in $(seq 100); do alive mariadb || break; sleep 0.1; done
    stop mariadb
}
rabbit_env() {  # rabbit_env CMD...: CMD with our node's environment (an `env` command line)
    echo env HOME="$S/rabbit" RABBITMQ_NODENAME=vdos@localhost RABBITMQ_NODE_IP_ADDRESS=$HOST \
        RABBITMQ_NODE_PORT=$P_RABBIT RABBITMQ_DIST_PORT=$P_RABBIT_DIST ERL_EPMD_PORT=$P_EPMD \
        ERL_EPMD_ADDRESS=$HOST RABBITMQ_MNESIA_BASE="$S/rabbit/mnesia" \
        RABBITMQ_LOG_BASE="$S/rabbit/log" RABBITMQ_CONFIG_FILE="$S/rabbit/rabbitmq.conf" \
        RABBITMQ_ENABLED_PLUGINS_FILE="$S/rabbit/enabled_plugins" \
        RABBITMQ_ADVANCED_CONFIG_FILE="$S/rabbit/advanced.config" \
        RABBITMQ_PID_FILE="$S/rabbit/rabbit.pid"
}
rabbit_start() {
    alive rabbitmq && port_open $P_RABBIT && return 0
    local p ports="$P_RABBIT $P_RABBIT_DIST"
    epmd_alive || ports="$ports $P_EPMD"
    for p in $ports; do
        port_free $p || { log "port $p is taken: $(ss -Hltnp "sport = :$p")"; return 1; }
    done
    mkdir -p "$S/rabbit/mnesia" "$S/rabbit/log"
    echo '[].' >"$S/rabbit/enabled_plugins"
    # Erlang's distribution port on loopback too
    echo '[{kernel, [{inet_dist_use_interface, {127,0,0,1}}]}].' >"$S/rabbit/advanced.config"
    printf 'listeners.tcp.1 = %s:%s\nlog.console = true\nlog.file = false\n' $HOST $P_RABBIT >"$S/rabbit/rabbitmq.conf"
    # epmd of our own, on its own port, in the foreground: ours by pid
    epmd_alive || start epmd env HOME="$S/rabbit" /usr/bin/epmd -address $HOST -port $P_EPMD
    # shellcheck disable=SC2046  # the environment's words, none with spaces
    start rabbitmq $(rabbit_env) /usr/lib/rabbitmq/bin/rabbitmq-server
}
# the epmd's command line does not name $S: it is ours by its pid file and port
epmd_alive() { local p; p=$(pid_of epmd) && [ -n "$p" ] && ss -Hltnp "sport = :$P_EPMD" | grep -q "pid=$p,"; }
rabbit_stop() {
    stop rabbitmq
    if epmd_alive; then kill "$(pid_of epmd)" || true; fi
    rm -f "$S/run/epmd.pid"
}

# ---------------------------------------------------------------------------------------------
# databases: built once per DBKEY, a copy of the datadir reused by every later `up`
# ---------------------------------------------------------------------------------------------
new_secrets() {
    local k
    for k in DB_PW ADMIN_PW DEMO_PW ALT_PW SERVICE_PW; do
        printf '%s=%s\n' $k "$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
    done
}
# manage TOOL ARGS...: one of the services' db tools, logged to $S/log/db-TOOL.log (arguments
# are not logged: one is a password)
manage() { "$VENV/bin/$1" "${@:2}" >>"$S/log/db-$1.log" 2>&1 || { log "$1 $2 $3 failed (see $S/log/db-$1.log)"; return 1; }; }
build_db() {  # a new datadir in $S/mysql/data with every schema; mariadb left running
    rm -rf "$S/mysql" && mkdir -p "$S/mysql"
    mariadb-install-db --no-defaults --datadir="$S/mysql/data" --user=root \
        --auth-root-authentication-method=socket --skip-test-db >"$S/log/db-build.log" 2>&1 ||
        { log "mariadb-install-db failed (see $S/log/db-build.log)"; return 1; }
    mysql_start || return 1
    local d
    for d in keystone placement glance neutron nova_api nova_cell0 nova_cell1 cinder; do
        SQL -e "CREATE DATABASE $d CHARACTER SET utf8mb4" || return 1
    done
    SQL -e "CREATE USER 'vd'@'$HOST' IDENTIFIED BY '$DB_PW'; GRANT ALL ON *.* TO 'vd'@'$HOST'" || return 1
    { manage keystone-manage --config-file "$S/etc/keystone/keystone.conf" db_sync && keystone_keys; } &
    local k=$!
    manage placement-manage --config-file "$S/etc/placement/placement.conf" db sync &
    local p=$!
    manage glance-manage --config-dir "$S/etc/glance" db_sync &
    local g=$!
    manage neutron-db-manage --config-file "$S/etc/neutron/neutron.conf" \
        --config-file "$S/etc/neutron/plugins/ml2/ml2_conf.ini" upgrade heads &
    local n=$!
    manage cinder-manage --config-file "$S/etc/cinder/cinder.conf" db sync &
    local c=$!
    local nc="--config-file $S/etc/nova/nova.conf"
    { manage nova-manage $nc api_db sync &&
      manage nova-manage $nc cell_v2 map_cell0 --database_connection "$(db nova_cell0)" &&
      manage nova-manage $nc cell_v2 create_cell --name cell1 &&
      manage nova-manage $nc db sync; } &
    local v=$! rc=0
    wait $k || rc=1
    manage keystone-manage --config-file "$S/etc/keystone/keystone.conf" bootstrap \
        --bootstrap-password "$ADMIN_PW" --bootstrap-region-id $REGION \
        --bootstrap-admin-url "http://$HOST:$P_KEYSTONE/v3" \
        --bootstrap-public-url "http://$HOST:$P_KEYSTONE/v3" \
        --bootstrap-internal-url "http://$HOST:$P_KEYSTONE/v3" || rc=1
    wait $p || rc=1; wait $g || rc=1; wait $n || rc=1; wait $c || rc=1; wait $v || rc=1
    return $rc
}
dbkey() {  # the databases' cache key: the venv's, what builds them, the ports and state dir
    { echo "$KEY $S $P_MYSQL $P_RABBIT $P_KEYSTONE"
      declare -f new_secrets manage build_db db write_confs authtoken client_auth ensure_db keystone_keys
      cat "$T/cloud.py"; } | sha256sum | cut -c1-12
}
ensure_db() {
    local DBCACHE; DBCACHE=/var/tmp/virtdriver-openstack-db-$(dbkey)
    if [ -e "$S/mysql/.ready" ] && [ -s "$S/secrets.env" ]; then . "$S/secrets.env"; write_confs; mysql_start; return; fi
    if [ -e "$DBCACHE/.complete" ]; then
        rm -rf "$S/mysql" && mkdir -p "$S/mysql"
        cp -a "$DBCACHE/data" "$S/mysql/data" && install -m 600 "$DBCACHE/secrets.env" "$S/secrets.env"
        touch "$S/mysql/.ready"
        . "$S/secrets.env"; write_confs; mysql_start; return
    fi
    local t; t=$(now)
    new_secrets >"$S/secrets.env"; chmod 600 "$S/secrets.env"; . "$S/secrets.env"
    write_confs
    build_db || return 1
    # keystone's users, projects, roles, services and endpoints belong to the cached databases
    keystone_start && wait_http keystone "$URL_KEYSTONE" 120 || return 1
    cloud identity >"$S/log/identity.log" 2>&1 || { log "keystone setup failed: $(tail -3 "$S/log/identity.log")"; return 1; }
    stop keystone
    mysql_stop   # a clean copy
    rm -rf "$DBCACHE.build" && mkdir -p "$DBCACHE.build"
    cp -a "$S/mysql/data" "$DBCACHE.build/data" && install -m 600 "$S/secrets.env" "$DBCACHE.build/secrets.env"
    touch "$DBCACHE.build/.complete" && rm -rf "$DBCACHE" && mv "$DBCACHE.build" "$DBCACHE"
    log "databases built in $(since "$t")s ($DBCACHE)"
    drop_other_keys "$DBCACHE"
    touch "$S/mysql/.ready"
    mysql_start
}

# ---------------------------------------------------------------------------------------------
# the services
# ---------------------------------------------------------------------------------------------
NOVA_CONF=$S/etc/nova/nova.conf
URL_KEYSTONE=http://$HOST:$P_KEYSTONE/v3
URL_NOVA=http://$HOST:$P_NOVA/v2.1
URL_PLACEMENT=http://$HOST:$P_PLACEMENT
URL_GLANCE=http://$HOST:$P_GLANCE
URL_CINDER=http://$HOST:$P_CINDER/v3
URL_NEUTRON=http://$HOST:$P_NEUTRON
ceph() { env VIRTDRIVER_BACKENDS_DIR="$CEPH_DIR" VD_CEPH_MON_PORT=$P_CEPH VD_CEPH_MON_V2_PORT=$P_CEPH_V2 "$here/scripts/test-backends.sh" "$@" 8>&-; }
cloud() {  # cloud.py with what it reads from the environment
    env OS_AUTH_URL="$URL_KEYSTONE" OS_REGION_NAME=$REGION ADMIN_PW="$ADMIN_PW" DEMO_PW="$DEMO_PW" \
        ALT_PW="$ALT_PW" SERVICE_PW="$SERVICE_PW" VD_OS_NOVA_URL="$URL_NOVA" \
        VD_OS_PLACEMENT_URL="$URL_PLACEMENT" VD_OS_GLANCE_URL="$URL_GLANCE" \
        VD_OS_CINDER_URL="$URL_CINDER" VD_OS_NEUTRON_URL="$URL_NEUTRON" "$PY" "$T/cloud.py" "$@"
}
keystone_keys() {  # fernet and credential keys (bootstrap needs them too); not cached
    [ -d "$S/keystone/fernet-keys" ] && [ -d "$S/keystone/credential-keys" ] && return 0
    mkdir -p "$S/keystone"
    manage keystone-manage --config-file "$S/etc/keystone/keystone.conf" fernet_setup \
        --keystone-user root --keystone-group root &&
    manage keystone-manage --config-file "$S/etc/keystone/keystone.conf" credential_setup \
        --keystone-user root --keystone-group root
}
keystone_start() {
    alive keystone && return 0
    keystone_keys || return 1
    gunicorn_ keystone $P_KEYSTONE keystone OS_KEYSTONE_CONFIG_DIR="$S/etc/keystone"
}
start_apis() {  # everything else but nova-compute: they need keystone's users only when asked
    mkdir -p "$S/glance" "$S/neutron" "$S/nova/state" "$S/nova/instances" "$S/cinder/state"
    alive placement || gunicorn_ placement $P_PLACEMENT placement OS_PLACEMENT_CONFIG_DIR="$S/etc/placement"
    alive glance || gunicorn_ glance $P_GLANCE glance OS_GLANCE_CONFIG_DIR="$S/etc/glance"
    alive neutron || gunicorn_ neutron $P_NEUTRON neutron OS_NEUTRON_CONFIG_DIR="$S/etc/neutron"
    alive nova-api || gunicorn_ nova-api $P_NOVA nova_api OS_NOVA_CONFIG_DIR="$S/etc/nova"
    alive cinder || start cinder "$PY" "$here/testhosts/cinder/launcher.py" --config-file "$S/etc/cinder/cinder.conf"
}
start_nova_services() {  # these log in to keystone (placement) as they start: after `identity`
    alive nova-conductor || start nova-conductor "$VENV/bin/nova-conductor" --config-file "$NOVA_CONF" --log-file "$S/log/nova-conductor.log"
    alive nova-scheduler || start nova-scheduler "$VENV/bin/nova-scheduler" --config-file "$NOVA_CONF" --log-file "$S/log/nova-scheduler.log"
}
wait_apis() {
    local rc=0
    wait_http placement "$URL_PLACEMENT" 120 || rc=1
    wait_http glance "$URL_GLANCE" 120 || rc=1
    wait_http neutron "$URL_NEUTRON" 120 || rc=1
    wait_http nova-api "$URL_NOVA" 120 || rc=1
    wait_http cinder "$URL_CINDER" 120 || rc=1
    wait_nova_service conductor || rc=1
    wait_nova_service scheduler || rc=1
    return $rc
}
ceph_secret() {  # the libvirt secret nova's guests use for our Cinder's cephx user
    local key; key=$(ceph env | sed -n 's/^export VD_CEPH_CLIENT_KEY=//p')
    [ -n "$key" ] || { log "no cephx key of the second Ceph"; return 1; }
    "$PY" - "$CEPH_SECRET_UUID" "$key" <<'PY'
import base64, sys, libvirt
uid, key = sys.argv[1], sys.argv[2]
libvirt.registerErrorHandler(lambda *_: None, None)  # a missing secret is expected
conn = libvirt.open("qemu:///system")
try:
    secret = conn.secretLookupByUUIDString(uid)
except libvirt.libvirtError:
    secret = conn.secretDefineXML(
        f"<secret ephemeral='no' private='yes'><uuid>{uid}</uuid><usage type='ceph'>"
        f"<name>virtdriver-openstack {uid}</name></usage></secret>", 0)
secret.setValue(base64.b64decode(key), 0)
PY
}
running_driver() { cat "$S/run/nova-compute.driver" 2>/dev/null; }
compute_start() {
    if alive nova-compute; then
        [ "$(running_driver)" = "$DRIVER" ] && return 0
        log "nova-compute runs $(running_driver), restarting it with $DRIVER"
        stop nova-compute
    fi
    ceph_secret || return 1
    cloud compute-record "$NOVA_CONF" >>"$S/log/compute-record.log" 2>&1 ||
        { log "nova-compute's service record failed: $(tail -3 "$S/log/compute-record.log")"; return 1; }
    start nova-compute "$VENV/bin/nova-compute" --config-file "$NOVA_CONF" --log-file "$S/log/nova-compute.log"
    echo "$DRIVER" >"$S/run/nova-compute.driver"
    # up when placement knows the host and the scheduler mapped it (discover_hosts_in_cells_interval)
    local i
    for i in $(seq 240); do
        alive nova-compute || { log "nova-compute died: $(tail -5 "$S/log/nova-compute.log" "$S/log/nova-compute.out" | tr '\n' ' ')"; return 1; }
        compute_ready && return 0
        sleep 0.5
    done
    log "nova-compute did not become ready in 120 s (see $S/log/nova-compute.log)"; return 1
}
wait_nova_service() {  # wait_nova_service conductor|scheduler: until its service record is up
    local i
    for i in $(seq 240); do
        alive "nova-$1" || { log "nova-$1 died: $(grep -E 'ERROR|CRITICAL' "$S/log/nova-$1.log" | tail -2)"; return 1; }
        SQL -N -e "SELECT 1 FROM nova_cell1.services WHERE \`binary\`='nova-$1' AND deleted=0 AND
            last_seen_up > NOW() - INTERVAL 60 SECOND" 2>/dev/null | grep -q 1 && return 0
        sleep 0.5
    done
    log "nova-$1 did not report in within 120 s"; return 1
}
compute_ready() {  # the provider is named after the hypervisor's host name, not $COMPUTE_HOST
    SQL -N -e "SELECT 1 FROM nova_api.host_mappings WHERE host='$COMPUTE_HOST'" 2>/dev/null | grep -q 1 &&
        SQL -N -e "SELECT 1 FROM nova_cell1.compute_nodes c JOIN placement.resource_providers r
            ON r.uuid = c.uuid WHERE c.host='$COMPUTE_HOST' AND c.deleted=0" 2>/dev/null | grep -q 1
}

SERVICES="mariadb rabbitmq keystone placement glance neutron nova-api nova-conductor nova-scheduler cinder nova-compute"
up() {
    local t; t=$(now)
    mkdir -p "$S/run" "$S/log"
    if [ "${VD_OS_NO_COMPUTE:-0}" != 1 ] && status >/dev/null 2>&1 && [ "$(running_driver)" = "$DRIVER" ]; then
        log "already up"; return 0
    fi
    local -a need=(mariadb-server rabbitmq-server)
    local p missing=()
    for p in "${need[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    # Debian's packages start their system services unless a policy says no: keep them off
    if [ ${#missing[@]} -gt 0 ]; then
        local own_policy=0
        [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; own_policy=1; }
        local rc=0; apt_install "${missing[@]}" || rc=$?
        ((own_policy)) && rm -f /usr/sbin/policy-rc.d
        ((rc == 0)) || return 1
    fi
    build_venv || return 1
    install_virtdriver || return 1
    local tp; tp=$(now)
    phase() { log "$1 in $(since "$tp")s"; tp=$(now); }
    ceph status ceph >/dev/null 2>&1 || ceph up ceph >>"$S/log/ceph.log" 2>&1 || true
    ceph status ceph >/dev/null 2>&1 || { log "the second Ceph did not start (see $S/log/ceph.log)"; return 1; }
    phase "Ceph"
    ensure_db || return 1
    phase "databases"
    # all at once: each waits for what it needs (MariaDB is up; RabbitMQ is retried)
    rabbit_start || return 1
    keystone_start || return 1
    start_apis
    wait_http keystone "$URL_KEYSTONE" 120 || return 1
    phase "keystone"
    start_nova_services
    wait_port rabbitmq $P_RABBIT 90 || return 1
    wait_apis || return 1
    phase "RabbitMQ, placement, glance, neutron, nova-api, conductor, scheduler, cinder"
    cloud resources >"$S/resources.env.new" 2>"$S/log/resources.log" ||
        { log "flavors/image/volume types failed: $(tail -3 "$S/log/resources.log")"; return 1; }
    mv "$S/resources.env.new" "$S/resources.env"
    phase "flavors, image, volume types"
    if [ "${VD_OS_NO_COMPUTE:-0}" = 1 ]; then
        log "up without nova-compute (VD_OS_NO_COMPUTE=1) in $(since "$t")s"; return 0
    fi
    compute_start || return 1
    phase "nova-compute"
    log "up in $(since "$t")s"
}

# instance uuids nova ever had (deleted or not): the only libvirt domains `down` removes
our_instances() { SQL -N -e "SELECT uuid FROM nova_cell1.instances" 2>/dev/null; }
down() {
    local uuids=""
    # nova's instance list is in MariaDB: start it again if it stopped
    if ! alive mariadb && [ -d "$S/mysql/data" ]; then mysql_start || true; fi
    if alive mariadb; then uuids=$(our_instances) || true; fi
    local s
    stop nova-compute cinder nova-scheduler nova-conductor nova-api neutron glance placement keystone
    # virsh, not the venv: `down` works whichever venv (or none) the state was made with
    local u
    for u in $uuids; do
        virsh -q -c qemu:///system dominfo "$u" >/dev/null 2>&1 || continue
        virsh -q -c qemu:///system destroy "$u" >/dev/null 2>&1 || true
        virsh -q -c qemu:///system undefine --nvram "$u" >/dev/null 2>&1 ||
            virsh -q -c qemu:///system undefine "$u" >/dev/null 2>&1 || true
        log "removed nova's guest $u"
    done
    if virsh -q -c qemu:///system secret-dumpxml "$CEPH_SECRET_UUID" >/dev/null 2>&1; then
        virsh -q -c qemu:///system secret-undefine "$CEPH_SECRET_UUID" >/dev/null
    fi
    rabbit_stop
    mysql_stop
    if [ -d "$CEPH_DIR" ]; then ceph down ceph >/dev/null 2>&1 || log "the second Ceph did not stop cleanly"; fi
    rm -rf "$S"
    log "down"
}

status() {
    local s rc=0 state
    for s in $SERVICES; do
        state=down
        if alive "$s"; then
            case $s in
                mariadb) port_open $P_MYSQL && state=up ;;
                rabbitmq) port_open $P_RABBIT && state=up ;;
                keystone) port_open $P_KEYSTONE && state=up ;;
                placement) port_open $P_PLACEMENT && state=up ;;
                glance) port_open $P_GLANCE && state=up ;;
                neutron) port_open $P_NEUTRON && state=up ;;
                nova-api) port_open $P_NOVA && state=up ;;
                cinder) port_open $P_CINDER && state=up ;;
                *) state=up ;;
            esac
        fi
        echo "$s: $state"
        [ $state = up ] || rc=1
    done
    if ceph status ceph >/dev/null 2>&1; then echo "ceph: up"; else echo "ceph: down"; rc=1; fi
    return $rc
}

kv() {
    local v=$2
    [[ $v =~ ^[A-Za-z0-9_.:/+=@,%-]*$ ]] || v=$(printf '%q' "$v")
    printf 'export %s=%s\n' "$1" "$v"
}
env_() {
    local up=0; status >/dev/null 2>&1 && up=1
    [ -s "$S/secrets.env" ] && . "$S/secrets.env"
    kv VD_OS_UP $up
    kv OS_AUTH_URL "$URL_KEYSTONE"
    kv OS_IDENTITY_API_VERSION 3
    kv OS_USERNAME admin
    kv OS_PASSWORD "${ADMIN_PW:-}"
    kv OS_PROJECT_NAME admin
    kv OS_USER_DOMAIN_NAME Default
    kv OS_PROJECT_DOMAIN_NAME Default
    kv OS_REGION_NAME $REGION
    kv OS_INTERFACE public
    kv OS_CLIENT_CONFIG_FILE "$S/clouds.yaml"
    kv VD_OS_ADMIN_USERNAME admin; kv VD_OS_ADMIN_PASSWORD "${ADMIN_PW:-}"; kv VD_OS_ADMIN_PROJECT_NAME admin
    kv VD_OS_DEMO_USERNAME demo; kv VD_OS_DEMO_PASSWORD "${DEMO_PW:-}"; kv VD_OS_DEMO_PROJECT_NAME demo
    kv VD_OS_ALT_USERNAME alt_demo; kv VD_OS_ALT_PASSWORD "${ALT_PW:-}"; kv VD_OS_ALT_PROJECT_NAME alt_demo
    kv VD_OS_DOMAIN_NAME Default
    local line
    if [ -s "$S/resources.env" ]; then
        while IFS='=' read -r k v; do kv "$k" "$v"; done <"$S/resources.env"
    fi
    kv VD_OS_KEYSTONE_URL "$URL_KEYSTONE"
    kv VD_OS_NOVA_URL "$URL_NOVA"
    kv VD_OS_PLACEMENT_URL "$URL_PLACEMENT"
    kv VD_OS_GLANCE_URL "$URL_GLANCE"
    kv VD_OS_CINDER_URL "$URL_CINDER"
    kv VD_OS_NEUTRON_URL "$URL_NEUTRON"
    kv VD_OS_NEUTRON real
    kv VD_OS_COMPUTE_HOST $COMPUTE_HOST
    kv VD_OS_COMPUTE_DRIVER "$(running_driver)"
    kv VD_OS_LIBVIRT_URI qemu:///system
    kv VD_OS_PYTHON "$PY"
    kv VD_OS_DIR "$S"
    kv VD_OS_LOG_DIR "$S/log"
    kv VD_OS_CEPH_CONF "$CEPH_DIR/ceph/ceph.conf"
    kv VD_OS_CEPH_POOL volumes
}

case "${1:-}" in
    up|down) [ "$(id -u)" = 0 ] || { log "$1 needs root"; exit 2; }
             mkdir -p "$(dirname "$S")"
             exec 8>"$S.lock"; flock -w 900 8 || { log "another $0 holds $S.lock"; exit 2; }
             "$1" ;;
    status) status ;;
    env) env_ ;;
    *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
