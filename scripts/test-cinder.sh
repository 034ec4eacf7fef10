#!/usr/bin/env bash
# A real Cinder for the tests: scripts/test-cinder.sh up|down|status|env
#
# One process (testhosts/cinder/launcher.py: API + scheduler + volume service, oslo.messaging's
# in-process fake:/ transport), sqlite, auth_strategy = noauth, the RBD driver on the test Ceph
# (scripts/test-backends.sh up ceph: pool `volumes`, user client.volumes), listening on
# 127.0.0.1 only. Its venv is built once and cached: /var/tmp/virtdriver-cinder-$VERSION
# (pip install cinder==$VERSION, built beside it and renamed, so only its python is run, never
# its scripts, whose #! name the build path; Debian's python3-rados/python3-rbd extension modules linked in,
# because this Python is not Debian's). State (config, sqlite, log, pid) under $S.
# noauth: send `X-Auth-Token: user:project` to project-less URLs (http://127.0.0.1:PORT/v3/...).
set -uo pipefail
VERSION=29.0.0
VENV=${VD_CINDER_VENV:-/var/tmp/virtdriver-cinder-$VERSION}
S=${VIRTDRIVER_CINDER_DIR:-/var/tmp/virtdriver-cinder-state}
PORT=${VD_CINDER_PORT:-18776}
SECRET_UUID=6a1f9a4e-2c3b-4d5e-8f70-91a2b3c4d5e6   # libvirt ceph secret the tests define
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log() { printf 'test-cinder: %s\n' "$*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

build_venv() {
    [ -x "$VENV/bin/python" ] && [ -e "$VENV/.complete" ] && return 0
    local t; t=$(now)
    local missing=()
    for p in python3-rados python3-rbd; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    if [ ${#missing[@]} -gt 0 ]; then
        apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
            { apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null 2>&1; apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } ||
            { log "cannot install ${missing[*]}"; return 1; }
    fi
    rm -rf "$VENV.build"
    python3 -m venv "$VENV.build" && "$VENV.build/bin/pip" install -q "cinder==$VERSION" 2>&1 |
        grep -v "^WARNING: Location" >&2
    "$VENV.build/bin/python" -c 'import cinder' 2>/dev/null || { log "pip install cinder==$VERSION failed"; return 1; }
    local site; site=$("$VENV.build/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    local abi; abi=$("$VENV.build/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("SOABI"))')
    for m in rados rbd; do
        local so; so=$(ls /usr/lib/python3/dist-packages/$m.cpython-*-x86_64-linux-gnu.so | head -1)
        [ -n "$so" ] || { log "no $m extension module from Debian's python3-$m"; return 1; }
        ln -sf "$so" "$site/$m.$abi.so"
    done
    "$VENV.build/bin/python" -c 'import rados, rbd' || { log "rados/rbd do not load in the venv"; return 1; }
    touch "$VENV.build/.complete" && rm -rf "$VENV" && mv "$VENV.build" "$VENV"
    log "venv $VENV built in $(since "$t")s"
}

pid_alive() { [ -f "$S/cinder.pid" ] && kill -0 "$(cat "$S/cinder.pid")" 2>/dev/null; }
# GET with noauth's token; prints the body, fails unless 2xx (python3: no curl on a fresh machine)
api_get() {
    python3 - "http://127.0.0.1:$PORT/v3$1" <<'PY' 2>/dev/null
import sys, urllib.request
req = urllib.request.Request(sys.argv[1], headers={"X-Auth-Token": "admin:admin"})
with urllib.request.urlopen(req, timeout=5) as reply:
    sys.stdout.write(reply.read().decode())
PY
}
api_up() { api_get /types >/dev/null; }

write_conf() {
    local ceph_conf=$1
    mkdir -p "$S/locks" "$S/state"
    cat >"$S/cinder.conf" <<CONF
[DEFAULT]
transport_url = fake:/
auth_strategy = noauth
osapi_volume_listen = 127.0.0.1
osapi_volume_listen_port = $PORT
osapi_volume_workers = 1
my_ip = 127.0.0.1
host = virtdriver-test
state_path = $S/state
api_paste_config = $VENV/etc/cinder/api-paste.ini
enabled_backends = ceph
default_volume_type = __DEFAULT__
scheduler_driver_init_wait_time = 1
report_interval = 2
periodic_interval = 2
log_file = $S/cinder.log
debug = false
[database]
connection = sqlite:///$S/cinder.sqlite
[oslo_concurrency]
lock_path = $S/locks
[coordination]
backend_url = file://$S/locks
[ceph]
volume_driver = cinder.volume.drivers.rbd.RBDDriver
volume_backend_name = ceph
rbd_pool = volumes
rbd_user = volumes
rbd_ceph_conf = $ceph_conf
rbd_secret_uuid = $SECRET_UUID
rbd_flatten_volume_from_snapshot = false
CONF
}

up() {
    local t; t=$(now)
    if pid_alive && api_up; then log "already up"; return 0; fi
    eval "$("$here/scripts/test-backends.sh" env)"
    [ "${VD_CEPH_UP:-0}" = 1 ] || { log "the test Ceph is down (scripts/test-backends.sh up ceph)"; return 1; }
    build_venv || return 1
    local tv; tv=$(now)
    down  # a launcher of ours that stopped answering, and its old state
    mkdir -p "$S"
    write_conf "$VD_CEPH_CONF"
    "$VENV/bin/python" -c 'import sys; from cinder.cmd.manage import main; sys.exit(main())' \
        --config-file "$S/cinder.conf" db sync >"$S/db-sync.log" 2>&1 ||
        { log "db sync failed: $(tail -3 "$S/db-sync.log")"; return 1; }
    setsid "$VENV/bin/python" "$here/testhosts/cinder/launcher.py" --config-file "$S/cinder.conf" \
        >"$S/launcher.out" 2>&1 </dev/null &
    echo $! >"$S/cinder.pid"
    for _ in $(seq 300); do
        api_up && break
        pid_alive || { log "cinder died: $(tail -5 "$S/launcher.out" "$S/cinder.log" 2>/dev/null)"; return 1; }
        sleep 0.1
    done
    api_up || { log "API did not answer"; return 1; }
    # the volume service must have reported in before a volume can be scheduled
    for _ in $(seq 300); do
        api_get "/os-services?binary=cinder-volume" | grep -q '"state": "up"' && break
        sleep 0.1
    done
    log "up in $(since "$t")s (db sync + start $(since "$tv")s) on 127.0.0.1:$PORT"
}

down() {
    if pid_alive; then
        local pid; pid=$(cat "$S/cinder.pid")
        kill "$pid"; for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null
    fi
    rm -rf "$S"
}

status() { if pid_alive && api_up; then echo "cinder: up"; else echo "cinder: down"; return 1; fi; }

env_() {
    local up=0; status >/dev/null 2>&1 && up=1
    echo "export VD_CINDER_UP=$up"
    echo "export VD_CINDER_URL=http://127.0.0.1:$PORT/v3"
    echo "export VD_CINDER_SECRET_UUID=$SECRET_UUID"
    echo "export VD_CINDER_LOG=$S/cinder.log"
}

case "${1:-}" in
    up) up ;; down) down ;; status) status ;; env) env_ ;; venv) build_venv ;;
    *) echo "usage: $0 up|down|status|env|venv" >&2; exit 2 ;;
esac
