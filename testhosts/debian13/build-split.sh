#!/usr/bin/env bash
# Build (or reuse) libvirt's split daemons for the Debian 13 host stack: virtqemud, virtsecretd
# and the rest of the modular daemons, from Debian's own libvirt 11.3 source package.
#
#   testhosts/debian13/build-split.sh        # prints the stage directory on stdout
#
# Debian builds the modular daemons but ships only libvirtd (no package of trixie, trixie-backports
# or sid holds virtqemud), so this builds them as RHEL ships them: Debian's source with its patches,
# the client library's default mode `direct` (a qemu:///system client talks to virtqemud's own
# socket, /run/libvirt/virtqemud-sock; there is no libvirt-sock). The build runs in the tree of
# build-tree.sh (under an overlay that is thrown away), and `meson install` writes into
# $BASE/split-<KEY>/stage, which run.sh lays over the tree when the stack runs split daemons.
# KEY hashes this script, the source package's checksums and the tree's key.
# Runs as root; downloads the source once into $BASE/src.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
self="$here/$(basename "${BASH_SOURCE[0]}")"
base=${VIRTDRIVER_DEBIAN13_CACHE:-/var/tmp/virtdriver-debian13}
mirror=${VIRTDRIVER_DEBIAN13_MIRROR:-http://deb.debian.org/debian}
version=11.3.0
debian_version=11.3.0-3+deb13u3   # the tree's libvirt (packages.txt: trixie's)
# sha256 of the source package's files, as trixie's Sources index lists them
sources="6bcb0c42c4580436fea262ced56f68a6afe20f7390b1bea2116718cc034a0283  libvirt_$version.orig.tar.xz
ec073ef64c50ab8732d7a3887a73500d9ebcbc87b1e927d4ec69ea5c58539325  libvirt_$debian_version.debian.tar.xz"
# what meson needs for the daemons below (the rest of Debian's build dependencies is for drivers
# left out here)
build_deps="meson ninja-build gcc pkg-config libglib2.0-dev libgnutls28-dev libxml2-dev
libxml2-utils libtirpc-dev libjson-c-dev libudev-dev libpciaccess-dev libcap-ng-dev libacl1-dev
libattr1-dev libnl-3-dev libnl-route-3-dev libselinux1-dev xsltproc python3-docutils perl xz-utils
patch gettext"
# Debian's own options for what is built, the drivers a compute host does not need turned off.
# libselinux and ACLs are what libvirt needs to give each QEMU a /dev of its own (its "mount"
# namespace): without them QEMU sees the host's /dev, and its image locks then span guests.
meson_options="--prefix=/usr --libdir=lib/x86_64-linux-gnu --libexecdir=/usr/lib/libvirt
--sysconfdir=/etc --localstatedir=/var -Drunstatedir=/run -Dinitconfdir=/etc/default
-Dno_git=true -Dpackager=virtdriver-testhosts -Dpackager_version=$debian_version
-Ddriver_libvirtd=enabled -Ddriver_qemu=enabled -Ddriver_remote=enabled
-Dremote_default_mode=direct -Ddriver_secrets=enabled -Ddriver_network=disabled
-Ddriver_interface=disabled -Ddriver_test=disabled -Ddriver_lxc=disabled -Ddriver_libxl=disabled
-Ddriver_vbox=disabled -Ddriver_esx=disabled -Ddriver_vmware=disabled -Ddriver_openvz=disabled
-Ddriver_ch=disabled -Ddriver_bhyve=disabled -Ddriver_hyperv=disabled -Ddriver_vz=disabled
-Dstorage_fs=disabled -Dstorage_dir=enabled -Dstorage_lvm=disabled -Dstorage_scsi=disabled
-Dstorage_iscsi=disabled -Dstorage_iscsi_direct=disabled -Dstorage_disk=disabled
-Dstorage_rbd=disabled -Dstorage_gluster=disabled -Dstorage_mpath=disabled -Dstorage_zfs=disabled
-Dstorage_vstorage=disabled -Dudev=enabled -Dpciaccess=enabled -Dcapng=enabled -Dlibnl=enabled
-Djson_c=enabled -Dqemu_user=libvirt-qemu -Dqemu_group=libvirt-qemu
-Dqemu_moddir=/usr/lib/x86_64-linux-gnu/qemu -Dqemu_datadir=/usr/share/qemu -Ddocs=disabled
-Dtests=disabled -Dnls=disabled -Drpath=disabled -Dinit_script=none -Dpolkit=disabled
-Dsasl=disabled -Dlibssh=disabled -Dlibssh2=disabled -Dselinux=enabled
-Dsecdriver_selinux=enabled -Dselinux_mount=/sys/fs/selinux -Dapparmor=disabled
-Dsecdriver_apparmor=disabled -Dnss=disabled -Ddtrace=disabled
-Daudit=disabled -Dfirewalld=disabled -Dwireshark_dissector=disabled -Dnbdkit=disabled
-Dbash_completion=disabled -Dsysctl_config=disabled -Dreadline=disabled -Dnumactl=disabled"

log() { printf 'build-split: %s\n' "$*" >&2; }
now() { date +%s.%N; }

# ---- inside: the build itself, in a private mount namespace, chrooted into the overlay ---------
if [ "${1:-}" = --inside ]; then
    root=$2 stage=$3   # the stage's path inside the root
    mount --rbind /proc "$root/proc"; mount --rbind /sys "$root/sys"; mount --rbind /dev "$root/dev"
    mount --bind /etc/resolv.conf "$root/etc/resolv.conf"
    in_root() {
        chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
            LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
    }
    in_root apt-get -o Acquire::Retries=3 -o Acquire::Check-Valid-Until=false update -qq
    # shellcheck disable=SC2086  # word lists
    in_root apt-get -o Acquire::Retries=3 install -y -qq --no-install-recommends $build_deps \
        >/dev/null
    src=/build/libvirt-$version
    in_root bash -c "cd /build && tar -xf libvirt_$version.orig.tar.xz && cd $src &&
        tar -xf ../libvirt_$debian_version.debian.tar.xz &&
        while read -r p; do case \$p in ''|'#'*) continue;; esac
            patch -p1 -s <debian/patches/\$p; done <debian/patches/series"
    # shellcheck disable=SC2086
    in_root bash -c "cd $src && meson setup build $(tr '\n' ' ' <<<"$meson_options") \
        >/build/meson.log 2>&1 ||
        { tail -n 40 /build/meson.log; exit 1; }"
    in_root ninja -C "$src/build" -j "$(nproc)" >/dev/null
    in_root env DESTDIR="$stage" meson install -C "$src/build" --no-rebuild --quiet >/dev/null
    exit 0
fi

# ---- the build -------------------------------------------------------------------------------
[ "$(id -u)" = 0 ] || { log "must run as root"; exit 1; }
tree=$("$here/build-tree.sh")
key=$( { cat "$self"; echo "$sources"; basename "$(dirname "$tree")"; } | sha256sum | cut -c1-16)
dest="$base/split-$key"
if [ -f "$dest/complete" ]; then
    log "reusing $dest"
    echo "$dest/stage"
    exit 0
fi
exec 9>"$base/build.lock"   # one build at a time (the tree's builds take the same lock)
flock 9
if [ -f "$dest/complete" ]; then
    log "reusing $dest (built while this run waited)"
    echo "$dest/stage"
    exit 0
fi
mkdir -p "$base/src"
while read -r sum file; do
    [ -f "$base/src/$file" ] && continue
    curl -sSf --retry 3 -o "$base/src/$file.part" "$mirror/pool/main/libv/libvirt/$file"
    mv "$base/src/$file.part" "$base/src/$file"
done <<<"$sources"
(cd "$base/src" && sha256sum --quiet -c - <<<"$sources") || { log "source checksums differ"; exit 1; }

work="$base/.split-$key.$$"
rm -rf "$work"
mkdir -p "$work/upper" "$work/ovl" "$work/root"
cleanup() {
    [ -d "$work" ] || return 0
    log "build failed; its log kept in $base/failed-split-$key.log"
    cp "$work/build.log" "$base/failed-split-$key.log" 2>/dev/null || true
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT
log "libvirt $debian_version's split daemons, built in the tree $tree (log: $work/build.log)"
t0=$(now)
# The overlay and every mount of the build live in a mount namespace of its own: they are gone
# when it ends, whatever happened.
# shellcheck disable=SC2016
if ! unshare --mount --propagation private -- bash -c '
    set -euo pipefail
    tree=$1 work=$2 src=$3 self=$4
    mount -t overlay overlay -o "lowerdir=$tree,upperdir=$work/upper,workdir=$work/ovl" "$work/root"
    mkdir -p "$work/root/build" "$work/root/stage"
    cp "$src"/libvirt_* "$work/root/build/"
    "$self" --inside "$work/root" /stage' build "$tree" "$work" "$base/src" "$self" \
        >"$work/build.log" 2>&1; then
    tail -n 30 "$work/build.log" >&2
    exit 1
fi
# Only what the split daemons add or replace: the tree's configuration stays (qemu.conf's user and
# security driver, libvirtd.conf's host UUID: build-tree.sh), as do the packaged files the stage
# does not hold.
mv "$work/upper/stage" "$work/stage"
(cd "$work/stage" && find etc -type f) | while read -r f; do
    [ ! -e "$tree/$f" ] || rm -f "$work/stage/$f"
done
rm -rf "$work/stage/usr/share/doc" "$work/stage/usr/share/man"
{ echo "libvirt $debian_version (Debian's source and patches), split daemons"
  ls "$work/stage/usr/sbin"; } >"$work/versions.txt"
echo "build $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }')" >"$work/timings.txt"
rm -rf --one-file-system "$work/upper" "$work/ovl" "$work/root"
touch "$work/complete"
trap - EXIT
mv "$work" "$dest"
log "built $dest in $(cat "$dest/timings.txt" | cut -d' ' -f2) s: $(tr '\n' ' ' <"$dest/versions.txt")"
for old in "$base"/split-*/complete; do
    old=${old%/complete}
    [ "$old" = "$dest" ] || rm -rf --one-file-system "$old"
done
echo "$dest/stage"
