#!/usr/bin/env bash
# The Debian 13 host stack: trixie's libvirtd 11.3 and QEMU 10.0 beside this machine's own, in a
# private mount namespace whose root is the tree of build-tree.sh (by pivot_root), with Python 3.13.
#
#   testhosts/debian13/run.sh up              build or reuse the tree, start the holder, the daemons
#   testhosts/debian13/run.sh exec CMD...     run CMD inside (cwd: the checkout; the tree's venv)
#   testhosts/debian13/run.sh status          exit 0 only when the stack is up and answers
#   testhosts/debian13/run.sh down            remove its guests, stop its daemons and the holder
#
# VIRTDRIVER_DEBIAN13_DAEMONS=split (for `up`): libvirt's split daemons instead of libvirtd, as
# RHEL runs them: virtqemud, virtsecretd and virtlogd, each on its own socket under /run/libvirt
# (no libvirt-sock), built from Debian's libvirt 11.3 source by build-split.sh and laid over the
# tree (Debian ships libvirtd only). `up` restarts a stack that runs the other kind.
#
# Inside (HOST.md, "A Debian 13 host inside this machine"):
#   /            an overlay: the cached tree below, a fresh upper layer per `up` (state of the
#                daemons, persistent definitions, logs), dropped by `down`: the tree stays clean
#   /proc        fresh;  /sys, /dev: recursive binds of the host's
#   /run         a tmpfs: the daemons' sockets never meet the host's /run/libvirt
#                (/run/tgtd is the host's: tgtadm reaches the test backends' tgtd)
#   /tmp         the host's (VIRTDRIVER_DEBIAN13_TMP=private: a tmpfs): the host's tgtd opens LUN
#                files that the tests make under pytest's tmp_path, by their path
#   /var/tmp     the host's (plain bind): the test backends' state, the cached test guests
#   /etc/hosts, /etc/resolv.conf   the host's: the network namespace is the host's too, so the
#                backends on 127.0.0.1 are reachable
#   CHECKOUT     the checkout this script is in, at the same path
# The project is not installed in the tree: `up` writes a .pth naming the checkout and a dist-info
# (entry points from pyproject.toml) into /run/virtdriver-site, and the `virtdriver` script into
# the venv's bin/ (the overlay's upper layer: gone with `down`).
# State (holder pid, overlay layers, logs) in $VIRTDRIVER_DEBIAN13_CACHE/stack (default base
# /var/tmp/virtdriver-debian13): one stack per machine. Only processes whose root is the stack's
# own overlay are ever signalled.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
project=$(cd "$here/../.." && pwd)
base=${VIRTDRIVER_DEBIAN13_CACHE:-/var/tmp/virtdriver-debian13}
st="$base/stack"
venv=/opt/virtdriver-venv
site=/run/virtdriver-site
ready=/run/virtdriver-debian13.ready
tmp_mode=${VIRTDRIVER_DEBIAN13_TMP:-host}
daemons=${VIRTDRIVER_DEBIAN13_DAEMONS:-libvirtd}
case "$daemons" in
    libvirtd|split) ;;
    *) echo "debian13: VIRTDRIVER_DEBIAN13_DAEMONS is libvirtd or split" >&2; exit 2 ;;
esac
temproot=/tmp/virtdriver-debian13          # pytest's temproot inside (PYTEST_DEBUG_TEMPROOT)

log() { printf 'debian13: %s\n' "$*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# A process of the stack, if it runs: the holder (by its pid file), else any process whose root
# has our ready mark (the daemons, after a holder that died), so `down` still finds the stack.
holder() {
    local p d
    p=$(cat "$st/pid" 2>/dev/null || true)
    if [[ $p =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$p/root$ready" 2>/dev/null)" = "$st" ]; then
        echo "$p"; return 0
    fi
    for d in /proc/[0-9]*; do
        if [ "$(cat "$d/root$ready" 2>/dev/null)" = "$st" ]; then echo "${d#/proc/}"; return 0; fi
    done
    return 1
}

# serves PID: the stack runs this checkout, the same directory the host sees here (a checkout
# removed and cloned anew at the same path is another directory: the stack still shows the old).
serves() {
    [ "$(cat "$st/project" 2>/dev/null)" = "$project" ] &&
        [ "$(cat "$st/daemons" 2>/dev/null || echo libvirtd)" = "$daemons" ] &&
        [ "$(stat -c %d:%i "$project")" = "$(in_ns "$1" stat -c %d:%i "$project" 2>/dev/null)" ]
}

# in_ns PID CMD...: CMD in the stack's mount namespace, a clean environment, the tree's venv first.
in_ns() {
    local pid=$1; shift
    local envs=(PATH="$venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
                HOME=/root LANG=C.UTF-8 LC_ALL=C.UTF-8 VIRTUAL_ENV="$venv" VIRTDRIVER_STACK=debian13
                # 3.13's bytecode goes into the overlay, not into the checkout's __pycache__
                PYTHONPYCACHEPREFIX=/root/.cache/pycache
                PYTEST_DEBUG_TEMPROOT="$temproot")
    local v
    # what a caller may pass on: CI, the terminal, the project's and pytest's own settings
    while IFS= read -r v; do envs+=("$v"); done < <(env | grep -E \
        '^(CI|TERM|COLUMNS|LINES|(VIRTDRIVER|VD|PYTEST|HYPOTHESIS)_[A-Za-z0-9_]*)=' \
        | grep -vE '^(VIRTDRIVER_STACK|PYTEST_DEBUG_TEMPROOT)=' || true)
    nsenter --target "$pid" --mount --root --wd -- /usr/bin/env -i "${envs[@]}" "$@"
}

# Everything of the stack: processes whose root is its overlay (the daemons, their QEMUs in their
# own mount namespaces, what `exec` started, nested private daemons), the holder excluded.
stack_pids() {
    local pid=$1 want d p
    want=$(stat -L -c %d:%i "/proc/$pid/root") || return 0
    for d in /proc/[0-9]*; do
        p=${d#/proc/}
        if [ "$p" = "$pid" ] || [ "$p" = $$ ]; then continue; fi
        [ "$(stat -L -c %d:%i "$d/root" 2>/dev/null)" = "$want" ] && echo "$p"
    done
    return 0
}

# The holder: makes the namespace's mounts, pivots into the overlay, then sleeps.
# shellcheck disable=SC2016
holder_script='
set -euo pipefail
root=$1 lower=$2 upper=$3 work=$4 project=$5 tmp_mode=$6 pidfile=$7 ready=$8 st=$9
echo $$ >"$pidfile"
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$upper,workdir=$work" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o mode=755 tmpfs "$root/run"
mkdir -p "$root/run/lock" "$root/run/libvirt"
if [ -d /run/tgtd ]; then mkdir -p "$root/run/tgtd"; mount --bind /run/tgtd "$root/run/tgtd"; fi
if [ "$tmp_mode" = host ]; then mount --rbind /tmp "$root/tmp"
else mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"; fi
mount --bind /var/tmp "$root/var/tmp"   # not --rbind: the overlay itself is below /var/tmp
for f in /etc/hosts /etc/resolv.conf; do mount --bind "$f" "$root$f"; done
mkdir -p "$root$project"
mount --rbind "$project" "$root$project"
cd "$root"
pivot_root . .oldroot
cd /
umount -l /.oldroot
echo "$st" >"$ready"
exec sleep infinity
'

# The checkout as an installed project: its sys.path entry and metadata with its entry points in
# $site; its console scripts beside the venv's python (the tests look there), in the overlay.
# shellcheck disable=SC2016
site_script='
import pathlib, sys, tomllib
project, site, python = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
bindir = pathlib.Path(python).parent
p = tomllib.loads((project / "pyproject.toml").read_text())["project"]
name, version = p["name"], p["version"]
site.mkdir(parents=True, exist_ok=True)
(site / "virtdriver-checkout.pth").write_text(f"{project}\n")
# bytecode of 3.13 out of the checkout, also for children run with an environment of their own
(site / "virtdriver-pycache.pth").write_text(
    "import sys; sys.pycache_prefix = sys.pycache_prefix or \"/root/.cache/pycache\"\n")
info = site / f"{name}-{version}.dist-info"
info.mkdir(exist_ok=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
groups = {"console_scripts": p.get("scripts", {}), **p.get("entry-points", {})}
(info / "entry_points.txt").write_text("".join(
    f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n"
    for g, eps in groups.items()))
for script_name, target in p.get("scripts", {}).items():
    module, func = target.split(":")
    script = bindir / script_name
    script.write_text(f"#!{python}\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n")
    script.chmod(0o755)'

socket_name() {  # the socket qemu:///system reaches: libvirtd's, or virtqemud's
    if [ "$daemons" = split ]; then echo virtqemud-sock; else echo libvirt-sock; fi
}

wait_socket() {  # wait_socket PID: the daemon answers inside
    local pid=$1 i
    for i in $(seq 1 300); do
        if [ -S "/proc/$pid/root/run/libvirt/$(socket_name)" ] \
                && in_ns "$pid" virsh -q -c qemu:///system version >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.1
    done
    return 1
}

cmd_up() {
    local pid t0 tb tree
    if pid=$(holder); then
        if serves "$pid"; then
            log "already up (holder $pid, root $(cat "$st/tree"))"
            return 0
        fi
        log "up, but for another checkout ($(cat "$st/project" 2>/dev/null)): restarting it for $project"
        cmd_down
    fi
    [ "$(id -u)" = 0 ] || { log "must run as root"; exit 1; }
    t0=$(now)
    tree=$("$here/build-tree.sh")
    log "tree ready in $(since "$t0") s: $tree"
    local lower=$tree
    if [ "$daemons" = split ]; then
        lower="$("$here/build-split.sh"):$tree"
        log "split daemons ready in $(since "$t0") s"
    fi
    tb=$(now)
    cmd_down quiet  # leftovers of an earlier stack that died
    [ -d /run/tgtd ] || log "note: no /run/tgtd here (the backends' tgtd is not up): tgtadm inside will not reach it until the next up"
    mkdir -p "$st"
    rm -rf "$st/upper" "$st/work" "$st/pid"
    mkdir -p "$st/upper" "$st/work" "$st/root" "$temproot"
    echo "$tree" >"$st/tree"
    echo "$project" >"$st/project"
    echo "$daemons" >"$st/daemons"
    setsid unshare --mount --propagation private -- bash -c "$holder_script" holder \
        "$st/root" "$lower" "$st/upper" "$st/work" "$project" "$tmp_mode" "$st/pid" "$ready" "$st" \
        </dev/null >"$st/holder.log" 2>&1 &
    local i
    for i in $(seq 1 100); do
        pid=$(holder) && break
        if ! kill -0 $! 2>/dev/null; then
            log "the holder failed:"; cat "$st/holder.log" >&2; exit 1
        fi
        sleep 0.1
    done
    [ -n "${pid:-}" ] || { log "the holder gave no namespace in 10 s"; cat "$st/holder.log" >&2; exit 1; }
    log "holder $pid (mount namespace $(readlink "/proc/$pid/ns/mnt"))"
    # QEMU's capabilities as an earlier `up` of this tree probed them (about 8 s saved; libvirt
    # probes again by itself when a binary, the kernel or libvirt changed)
    local caps
    caps="$(dirname "$tree")/qemu-caps"
    [ "$daemons" = libvirtd ] || caps="$caps-$daemons"  # another libvirt build: probed anew
    if [ -d "$caps" ]; then
        mkdir -p "/proc/$pid/root/var/cache/libvirt/qemu/capabilities"
        cp -a "$caps/." "/proc/$pid/root/var/cache/libvirt/qemu/capabilities/"
    fi
    local d main=libvirtd started=(virtlogd libvirtd)
    if [ "$daemons" = split ]; then
        main=virtqemud started=(virtlogd virtsecretd virtqemud)
        # the host's own UUID, as libvirtd.conf of the tree says it (migration between daemons)
        grep '^host_uuid' "/proc/$pid/root/etc/libvirt/libvirtd.conf" \
            >>"/proc/$pid/root/etc/libvirt/virtqemud.conf"
    fi
    for d in "${started[@]}"; do
        in_ns "$pid" env LIBVIRT_LOG_OUTPUTS="3:file:/var/log/libvirt/$d.log" "$d" -d
    done
    if ! wait_socket "$pid"; then
        log "$main did not come up; its log:"
        tail -n 20 "/proc/$pid/root/var/log/libvirt/$main.log" >&2 || true
        exit 1
    fi
    in_ns "$pid" "$venv/bin/python" -c "$site_script" "$project" "$site" "$venv/bin/python"
    if [ ! -d "$caps" ]; then
        rm -rf "$caps.tmp"
        cp -a "/proc/$pid/root/var/cache/libvirt/qemu/capabilities" "$caps.tmp" && mv "$caps.tmp" "$caps"
    fi
    log "up in $(since "$tb") s (with the tree: $(since "$t0") s): $(in_ns "$pid" virsh -q -c qemu:///system version | tr -s ' \n' ' ')"
}

# stop_pids SECONDS PID...: TERM, wait, then KILL
stop_pids() {
    local wait=$1 p i alive; shift
    (($#)) || return 0
    kill -TERM "$@" 2>/dev/null || true
    for ((i = 0; i < wait * 10; i++)); do
        alive=0
        for p in "$@"; do [ -d "/proc/$p" ] && [ "$(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null)" != Z ] && alive=1; done
        ((alive)) || return 0
        sleep 0.1
    done
    kill -KILL "$@" 2>/dev/null || true
}

cmd_down() {
    local quiet=${1:-} pid t0 dom p pids
    t0=$(now)
    if pid=$(holder); then
        # guests first (libvirt's own destroy), then the daemons, then whatever else is ours
        for dom in $(in_ns "$pid" virsh -q -c qemu:///system list --name 2>/dev/null || true); do
            in_ns "$pid" virsh -q -c qemu:///system destroy "$dom" >/dev/null 2>&1 || true
        done
        for p in libvirtd virtqemud virtsecretd virtlogd; do
            local f="/proc/$pid/root/run/$p.pid"
            [ -s "$f" ] || continue
            p=$(tr -dc 0-9 <"$f")
            [ -n "$p" ] && stack_pids "$pid" | grep -qx "$p" && stop_pids 20 "$p"
        done
        mapfile -t pids < <(stack_pids "$pid")
        if ((${#pids[@]})); then
            log "stopping ${#pids[@]} more processes of the stack:" \
                "$(for p in "${pids[@]}"; do cat "/proc/$p/comm" 2>/dev/null; done | sort | uniq -c | tr -s ' \n' ' ')"
            stop_pids 10 "${pids[@]}"
        fi
        stop_pids 5 "$pid"
    elif [ -z "$quiet" ]; then
        log "not up"
    fi
    # the overlay's layers go with the namespace (it is gone once its last process is)
    if [ -d "$st" ]; then
        if findmnt -rn -o TARGET | grep -qF "$st/"; then
            log "something is mounted under $st on the host: keeping it"; return 1
        fi
        rm -rf --one-file-system "$st/upper" "$st/work" "$st/pid" "$st/tree" "$st/project" \
            "$st/daemons"
    fi
    [ -n "$quiet" ] || log "down in $(since "$t0") s"
}

cmd_status() {
    local pid
    pid=$(holder) || { echo "debian13: down"; return 1; }
    echo "debian13: holder $pid, tree $(cat "$st/tree"), checkout $(cat "$st/project")," \
        "daemons $(cat "$st/daemons" 2>/dev/null || echo libvirtd)"
    serves "$pid" || { echo "debian13: not this checkout's ($project) or not $daemons: run up"
                       return 1; }
    in_ns "$pid" virsh -q -c qemu:///system version || return 1
    in_ns "$pid" virsh -q -c qemu:///system list --all
}

cmd_exec() {
    local pid
    pid=$(holder) || { log "not up (testhosts/debian13/run.sh up)"; exit 1; }
    (($#)) || set -- bash
    # cwd: the checkout (an argument, not a shell word: any path works)
    # shellcheck disable=SC2016  # expanded by the inner bash
    in_ns "$pid" /bin/bash -c 'cd "$0" && exec "$@"' "$project" "$@"
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    exec) shift; cmd_exec "$@" ;;
    *) echo "usage: $0 up|down|status|exec CMD..." >&2; exit 2 ;;
esac
