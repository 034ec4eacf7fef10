#!/usr/bin/env bash
# Build (or reuse) the root tree of the Debian 13 host stack: trixie with libvirt 11.3, QEMU 10.0
# and Python 3.13, plus a venv with the project's dependencies and test extra.
#
#   testhosts/debian13/build-tree.sh          # prints the tree's root directory on stdout
#
# The tree lives in $VIRTDRIVER_DEBIAN13_CACHE/<KEY>/root (default base /var/tmp/virtdriver-debian13)
# where KEY hashes this script, packages.txt, the suite and mirror, and the dependency lists read
# from pyproject.toml: change any of them and the next run builds a new tree; otherwise the cached
# one is reused. It is built in a temporary directory and renamed into place at the end, so a
# partial build never counts. Beside root/: build.log, timings.txt (seconds per step), inputs/.
# The project itself is not installed in the tree: run.sh bind-mounts the checkout and points the
# venv at it (a .pth and a small dist-info under the namespace's own /run).
#
# Runs as root on Debian 12; installs mmdebstrap on the host if it is missing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
self="$here/$(basename "${BASH_SOURCE[0]}")"
project=$(cd "$here/../.." && pwd)
base=${VIRTDRIVER_DEBIAN13_CACHE:-/var/tmp/virtdriver-debian13}
suite=${VIRTDRIVER_DEBIAN13_SUITE:-trixie}
mirror=${VIRTDRIVER_DEBIAN13_MIRROR:-http://deb.debian.org/debian}
venv=/opt/virtdriver-venv                     # inside the tree
site_dir=/run/virtdriver-site                 # inside the namespace: filled by run.sh up

log() { printf 'build-tree: %s\n' "$*" >&2; }
now() { date +%s.%N; }

# ---- hooks: run by mmdebstrap inside its build (the chroot has /proc, /sys, /dev mounted) ------
in_root() {  # in_root ROOT CMD...: a clean environment in the chroot
    local root=$1; shift
    chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive "$@"
}

hook_configure() {  # what libvirtd needs before its QEMU driver starts (HOST.md), and its config
    local root=$1 u
    for g in libvirt kvm libvirt-qemu; do
        in_root "$root" getent group "$g" >/dev/null || in_root "$root" groupadd --system "$g"
    done
    in_root "$root" id libvirt-qemu >/dev/null 2>&1 || in_root "$root" useradd --system \
        -g libvirt-qemu -G kvm -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu
    mkdir -p "$root"/var/log/libvirt/qemu "$root"/var/lib/libvirt/qemu \
        "$root"/var/lib/libvirt/images "$root"/var/cache/libvirt/qemu "$root/.oldroot"
    { echo '# virtdriver debian13 stack'
      echo 'user = "root"'
      echo 'group = "root"'
      echo 'security_driver = "none"'; } >>"$root/etc/libvirt/qemu.conf"
    # its own host_uuid: libvirt refuses a migration between two daemons that report the same one
    u=$(cat /proc/sys/kernel/random/uuid)
    { echo '# virtdriver debian13 stack'
      echo "host_uuid = \"$u\""; } >>"$root/etc/libvirt/libvirtd.conf"
}

hook_venv() {  # the venv at $venv with the project's dependencies and test extra
    local root=$1 requirements=$2
    cp "$requirements" "$root/tmp/vd-requirements.txt"
    # this machine's HTTPS goes through a proxy whose CA only the host's bundle has (build only)
    local cert=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
    [ -f "$cert" ] && cp "$cert" "$root/tmp/vd-ca.crt"
    in_root "$root" python3 -m venv "$venv"
    in_root "$root" env PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_DEFAULT_TIMEOUT=180 \
        ${cert:+PIP_CERT=/tmp/vd-ca.crt} "$venv/bin/pip" install -q -r /tmp/vd-requirements.txt
    rm -f "$root/tmp/vd-requirements.txt" "$root/tmp/vd-ca.crt"
    local sp
    sp=$(in_root "$root" "$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    # run.sh up writes the checkout's .pth and dist-info into $site_dir (a tmpfs of the namespace)
    echo "import site; site.addsitedir('$site_dir')" >"$root$sp/virtdriver-checkout.pth"
    in_root "$root" "$venv/bin/python" -m pip freeze >"$root$venv/freeze.txt"
}

stamp() { now >"$1"; }  # a step's start, for timings.txt

case "${1:-}" in
    --hook-configure) hook_configure "$2"; exit ;;
    --hook-venv) hook_venv "$2" "$3"; exit ;;
    --stamp) stamp "$2"; exit ;;
    "") ;;
    *) echo "usage: $0" >&2; exit 2 ;;
esac

# ---- the build -------------------------------------------------------------------------------
[ "$(id -u)" = 0 ] || { log "must run as root"; exit 1; }
packages=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/packages.txt" | tr -d ' \t')
# the project's dependencies and test extra, as pyproject.toml says them now (part of the key)
requirements=$(python3 - "$project/pyproject.toml" <<'EOF'
import sys, tomllib
p = tomllib.load(open(sys.argv[1], "rb"))["project"]
print("\n".join(p["dependencies"] + p["optional-dependencies"]["test"]))
EOF
)
key=$( { cat "$self" "$here/packages.txt"; echo "suite=$suite mirror=$mirror";
         echo "$requirements"; } | sha256sum | cut -c1-16)
dest="$base/$key"
if [ -f "$dest/complete" ]; then
    log "reusing $dest"
    echo "$dest/root"
    exit 0
fi
mkdir -p "$base/debs"
exec 9>"$base/build.lock"   # one build at a time; a second caller waits, then reuses
flock 9
if [ -f "$dest/complete" ]; then
    log "reusing $dest (built while this run waited)"
    echo "$dest/root"
    exit 0
fi
command -v mmdebstrap >/dev/null || {
    log "installing mmdebstrap"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends mmdebstrap >/dev/null
}

work="$base/.build-$key.$$"
rm -rf "$work"
mkdir -p "$work/inputs"
cp "$here/packages.txt" "$work/inputs/"
echo "$requirements" >"$work/inputs/requirements.txt"
echo "$suite $mirror" >"$work/inputs/suite"
buildlog="$work/build.log"
cleanup() {
    [ -d "$work" ] || return 0
    log "build failed; log kept in $base/failed-$key.log"
    cp "$buildlog" "$base/failed-$key.log" 2>/dev/null || true
    # never delete through a mount that a broken build left behind
    findmnt -rn -o TARGET | grep -F "$work/" | sort -r | while read -r m; do
        umount -l "$m" 2>/dev/null || true
    done
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT

log "mmdebstrap $suite: minbase + $(wc -w <<<"$packages") packages, then the venv (log: $buildlog)"
t0=$(now)
# --skip=download/empty with the sync hooks keeps the downloaded .debs in $base/debs for the next
# build (only downloads what changed); they are removed from the tree itself afterwards.
# shellcheck disable=SC2016  # "$1" in a hook is mmdebstrap's: the chroot
if ! mmdebstrap --mode=root --variant=minbase --components=main \
        --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
        --aptopt='Acquire::Check-Valid-Until "false"' --aptopt='Acquire::Retries "3"' \
        --include="$(tr '\n' ',' <<<"$packages" | sed 's/,$//')" \
        --skip=download/empty \
        --setup-hook='mkdir -p "$1"/var/cache/apt/archives' \
        --setup-hook="sync-in $base/debs /var/cache/apt/archives" \
        --essential-hook="$self --stamp $work/t.essential" \
        --customize-hook="$self --stamp $work/t.customize" \
        --customize-hook="sync-out /var/cache/apt/archives $base/debs" \
        --customize-hook='rm -f "$1"/var/cache/apt/archives/*.deb' \
        --customize-hook="$self --hook-configure \"\$1\"" \
        --customize-hook="$self --stamp $work/t.venv" \
        --customize-hook="$self --hook-venv \"\$1\" $work/inputs/requirements.txt" \
        --customize-hook="$self --stamp $work/t.venv-done" \
        "$suite" "$work/root" "$mirror" >>"$buildlog" 2>&1; then
    tail -n 30 "$buildlog" >&2
    exit 1
fi
t1=$(now)
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", b - a }'; }
{
    echo "essential $(secs "$t0" "$(cat "$work/t.essential")")"
    echo "packages $(secs "$(cat "$work/t.essential")" "$(cat "$work/t.customize")")"
    echo "configure $(secs "$(cat "$work/t.customize")" "$(cat "$work/t.venv")")"
    echo "venv $(secs "$(cat "$work/t.venv")" "$(cat "$work/t.venv-done")")"
    echo "finish $(secs "$(cat "$work/t.venv-done")" "$t1")"
    echo "total $(secs "$t0" "$t1")"
} >"$work/timings.txt"
rm -f "$work"/t.*
# shellcheck disable=SC2016  # dpkg-query's own format
{ chroot "$work/root" dpkg-query -W -f='${Package} ${Version}\n' libvirt-daemon qemu-system-x86 \
      python3; } >"$work/versions.txt" 2>/dev/null || true
touch "$work/complete"
mv "$work" "$dest"
log "built $dest in $(secs "$t0" "$t1") s: $(tr '\n' ' ' <"$dest/timings.txt")"

# Older trees (other keys) are of no further use, unless a stack runs on one now.
in_use=$(cat "$base/stack/tree" 2>/dev/null || true)   # run.sh up writes it, down removes it
for old in "$base"/*/complete; do
    old=${old%/complete}
    [ "$old" = "$dest" ] || [ "$old/root" = "$in_use" ] || rm -rf --one-file-system "$old"
done
echo "$dest/root"
