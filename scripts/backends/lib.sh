# shellcheck shell=bash
# What every backend of scripts/test-backends.sh shares: logging, our processes (a pid is ours
# only if its command line names the state directory $S), ports, packages, unmounting, env lines.
#
# Each backend B is one file beside this one (iscsi.sh, nbd.sh, ceph.sh, gluster.sh), sourced by
# scripts/test-backends.sh after this one; every such file defines, with its own constants:
#   B_PACKAGES        Debian packages it needs (installed by `up` unless VD_BACKENDS_NO_INSTALL=1)
#   check_B           exit 0 when it is up and answers (a protocol round trip)
#   start_B           start it under $S/B (runs with set -e; `up` stops leftovers first)
#   stop_B            stop what is ours and remove $S/B; never fails
#   alive_B           quick liveness for `env` (our pid files, no round trip)
#   env_B             its `export VD_B_...=...` lines (through kv)

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
pkgs_for() { local v="$1_PACKAGES"; echo "${!v}"; }
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
    apt-get -o DPkg::Lock::Timeout=600 update -qq >"$S/apt.log" 2>&1 || log "apt-get -o DPkg::Lock::Timeout=600 update failed (see $S/apt.log)"
    if ! apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >>"$S/apt.log" 2>&1; then
        log "apt-get -o DPkg::Lock::Timeout=600 install failed (see $S/apt.log); backends whose packages are missing will fail"
    fi
    log "packages done in $(since "$t0")s"
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

kv() {
    local v=$2
    [[ $v =~ ^[A-Za-z0-9_.:/+=@,%-]*$ ]] || v=$(printf '%q' "$v")
    printf 'export %s=%s\n' "$1" "$v"
}
