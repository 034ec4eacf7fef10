#!/usr/bin/env bash
# Build (or reuse) the nested test host's image: one Debian root file system for SELinux,
# AppArmor and kernel-initiator tests, with its kernel and initrd beside it.
#
#   testhosts/nested/build-image.sh            # prints the image directory on stdout
#
# The image lives in /var/tmp/virtdriver-nested/image-<KEY>/ (VIRTDRIVER_NESTED_CACHE overrides
# the base), KEY being a hash of this script, cache.sh, packages.txt, virtdriver_nested.cil and
# the Debian suite: change any of them and the next run builds a new image; otherwise the cached
# one is reused. Files:
#   rootfs.img   raw ext4, made with `mkfs.ext4 -d TREE` (no loop mount), SELinux-labelled
#   vmlinuz, initrd.img   the tree's own kernel and initrd, booted with -kernel/-initrd
#   build.log    what the build said (with the tree's `dpkg-query -W` before mkfs)
#   packages-installed.txt   that package list (name, version); timings.txt   seconds per step
# The tree is made by mmdebstrap (minbase + packages.txt, apt resolving the dependencies); the
# .debs it downloads are kept in $cache/debs, so a rebuild downloads only what changed.
# Runs as root on Debian 12 and installs what it needs (mmdebstrap, e2fsprogs) itself.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
suite=${VIRTDRIVER_NESTED_SUITE:-bookworm}
mirror=${VIRTDRIVER_NESTED_MIRROR:-http://deb.debian.org/debian}
image_size=${VIRTDRIVER_NESTED_IMAGE_SIZE:-6G}

log() { printf 'build-image: %s\n' "$*" >&2; }

[ "$(id -u)" = 0 ] || { log "must run as root"; exit 1; }

packages=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/packages.txt" | tr -d ' \t')
# shellcheck source=testhosts/nested/cache.sh
source "$here/cache.sh"
nested_cache_enter image build.lock \
    "${BASH_SOURCE[0]}" "$here/packages.txt" "$here/virtdriver_nested.cil" -- "suite=$suite"

need=()
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
command -v flock >/dev/null || need+=(util-linux)
if ((${#need[@]})); then
    log "installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

work="$cache/build-$key.$$"
tree="$work/tree"
rm -rf "$work"
mkdir -p "$work" "$cache/debs"
buildlog="$work/build.log"
: >"$work/timings.txt"
mounted=()
cleanup() {
    local m
    for m in "${mounted[@]}"; do umount -l "$m" 2>/dev/null || true; done
    if [ -d "$work" ]; then
        log "build failed; log kept in $cache/failed-$key.log"
        cp "$buildlog" "$cache/failed-$key.log" 2>/dev/null || true
        # mmdebstrap mounts /proc, /sys and /dev in the tree while it runs: never delete
        # through a mount that a broken build left behind.
        findmnt -rn -o TARGET | grep -F "$tree/" | sort -r | while read -r m; do
            umount -l "$m" 2>/dev/null || true
        done
        rm -rf --one-file-system "$work"
    fi
}
trap cleanup EXIT

step_start=0
step() { step_start=$SECONDS; log "$1"; }
step_done() { echo "$1 $((SECONDS - step_start))" >>"$work/timings.txt"; }
in_tree() { chroot "$tree" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
                DEBIAN_FRONTEND=noninteractive LC_ALL=C "$@"; }

# ---- 1. mmdebstrap --------------------------------------------------------------------------------
step "mmdebstrap $suite: minbase + $(wc -w <<<"$packages") packages (log: $buildlog)"
# minbase (Essential:yes, Priority:required, apt) + an explicit list, no Recommends: the image
# has nothing the tests do not need. apt downloads (pipelined, not one by one) and installs.
# The .debs: --skip=download/empty,essential/unlink leaves all of them (the essential set's
# too) in the tree's archive. The setup hook copies $cache/debs in first (apt downloads only
# what is missing); a customize hook drops the ones the mirror no longer has (apt-get
# autoclean) and copies the rest out to a fresh directory, which replaces $cache/debs; then
# they leave the tree. dpkg runs with force-unsafe-io (no fsync: a failed build is thrown away
# anyway); the tree keeps no mmdebstrap settings.
mkdir -p "$work/debs"
date +%s >"$work/t.start"
# shellcheck disable=SC2016  # "$1" in a hook is mmdebstrap's: the tree
if ! mmdebstrap --mode=root --variant=minbase --components=main \
        --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
        --aptopt='Acquire::Retries "3"' --dpkgopt=force-unsafe-io \
        --include="$(tr '\n' ',' <<<"$packages" | sed 's/,$//')" \
        --skip=download/empty,essential/unlink \
        --setup-hook='mkdir -p "$1"/var/cache/apt/archives' \
        --setup-hook="sync-in $cache/debs /var/cache/apt/archives" \
        --essential-hook="date +%s >$work/t.essential" \
        --customize-hook="date +%s >$work/t.customize" \
        --customize-hook='chroot "$1" apt-get -qq autoclean' \
        --customize-hook="sync-out /var/cache/apt/archives $work/debs" \
        --customize-hook='rm -f "$1"/var/cache/apt/archives/*.deb' \
        --customize-hook='rm -f "$1"/etc/apt/apt.conf.d/99mmdebstrap "$1"/etc/dpkg/dpkg.cfg.d/99mmdebstrap' \
        "$suite" "$tree" "$mirror" >>"$buildlog" 2>&1; then
    tail -n 30 "$buildlog" >&2
    exit 1
fi
rm -rf "$cache/debs"
mv "$work/debs" "$cache/debs"
# The step's two parts: the essential set (apt update, download, unpack and configure the
# Essential and required packages) and the rest (apt-get install of apt and the list).
{ echo "mmdebstrap-essential $(($(cat "$work/t.essential") - $(cat "$work/t.start")))"
  echo "mmdebstrap-packages $(($(cat "$work/t.customize") - $(cat "$work/t.essential")))"; } \
    >>"$work/timings.txt"
rm -f "$work"/t.*
# shellcheck disable=SC2016  # dpkg-query's own format
in_tree dpkg-query -W -f='${Package} ${Version}\n' >"$work/packages-installed.txt"
{ echo "---- installed packages ($(wc -l <"$work/packages-installed.txt")):"
  cat "$work/packages-installed.txt"; } >>"$buildlog"
step_done mmdebstrap

# ---- 2. configure the tree --------------------------------------------------------------------------
step "configuring the tree"
echo vdnested >"$tree/etc/hostname"
echo "127.0.1.1 vdnested" >>"$tree/etc/hosts"
# The root is /dev/vda; no fsck at boot (each boot runs on a throw-away snapshot of the image).
echo "/dev/vda / ext4 rw,errors=remount-ro 0 0" >"$tree/etc/fstab"
rm -f "$tree/etc/machine-id" "$tree/var/lib/dbus/machine-id"
: >"$tree/etc/machine-id"  # systemd makes a fresh one at every boot (none is kept)
in_tree passwd -d root >>"$buildlog" 2>&1

# SELinux: enforcing with Debian's policy "default"; no relabel at first boot (labelled below).
cat >"$tree/etc/selinux/config" <<'EOF'
SELINUX=enforcing
SELINUXTYPE=default
EOF
rm -f "$tree/.autorelabel"

# Exceptions to the policy, each for a reason: virtdriver_nested.cil (commented there) and
# virt_use_execmem on (TCG, since there is no /dev/kvm in the nested VM, generates code at run
# time). The guests' QEMU (svirt_t) stays enforced.
mkdir -p "$tree/usr/local/share/virtdriver-nested"
cp "$here/virtdriver_nested.cil" "$tree/usr/local/share/virtdriver-nested/"
in_tree semodule -i /usr/local/share/virtdriver-nested/virtdriver_nested.cil >>"$buildlog" 2>&1
in_tree semanage boolean -N -m --on virt_use_execmem >>"$buildlog" 2>&1

# The test run: a boot-time unit that starts only when the kernel command line asks for it
# (virtdriver.nested=1), so the same image also boots to a plain console for debugging. What it
# runs comes from the payload disk (/dev/vdb), so the in-VM runner can change without a rebuild.
cat >"$tree/usr/local/sbin/virtdriver-nested-boot" <<'EOF'
#!/bin/bash
# Unpack the payload disk (/dev/vdb: a tar of the project and its wheelhouse), run its runner,
# write /results as a tar onto /dev/vdc for the host, power off. Always powers off.
echo "vdnested: runner started $(cut -d' ' -f1 /proc/uptime) s after boot as $(id -Z 2>/dev/null || id -un)"
mkdir -p /results /opt/vd
rc=0
if tar xf /dev/vdb -C /opt/vd; then
    bash /opt/vd/project/testhosts/nested/guest-run.sh || rc=$?
else
    rc=$?
    echo "vdnested: cannot unpack the payload disk /dev/vdb"
fi
echo "$rc" >/results/runner-exit
tar cf /dev/vdc -C /results . && sync
echo "vdnested: results written (runner exit $rc), powering off"
systemctl poweroff -ff
EOF
chmod 755 "$tree/usr/local/sbin/virtdriver-nested-boot"
cat >"$tree/etc/systemd/system/virtdriver-nested.service" <<'EOF'
[Unit]
Description=virtdriver nested test run
ConditionKernelCommandLine=virtdriver.nested=1
After=local-fs.target auditd.service systemd-udev-settle.service
Wants=auditd.service

[Service]
Type=oneshot
# As an administrator's login shell runs (root's default context), not as init_t.
SELinuxContext=-unconfined_u:unconfined_r:unconfined_t:s0-s0:c0.c1023
ExecStart=/usr/local/sbin/virtdriver-nested-boot
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
EOF
in_tree systemctl enable virtdriver-nested.service >>"$buildlog" 2>&1
# Nothing starts at boot that the runner starts itself (libvirtd after its qemu.conf is written)
# or that only costs time under TCG.
for unit in libvirtd.service libvirtd.socket libvirtd-ro.socket libvirtd-admin.socket \
            libvirt-guests.service tgt.service open-iscsi.service iscsid.service \
            multipathd.service multipathd.socket nfs-server.service rpcbind.service \
            rpcbind.socket nfs-client.target apt-daily.timer apt-daily-upgrade.timer \
            e2scrub_all.timer e2scrub_reap.service fstrim.timer man-db.timer \
            dpkg-db-backup.timer systemd-timesyncd.service; do
    in_tree systemctl disable "$unit" >>"$buildlog" 2>&1 || true
done
in_tree systemctl mask serial-getty@ttyS0.service getty@tty1.service >>"$buildlog" 2>&1
step_done configure

# ---- 3. SELinux labels ----------------------------------------------------------------------------
# setfiles from inside the tree (its own policy and file_contexts), with /proc mounted. This
# kernel has no SELinux, but root may write security.selinux xattrs, and mkfs.ext4 -d copies
# them: the image boots enforcing with no relabelling boot (which costs 5.5 min under TCG).
step "labelling the tree for SELinux"
mount -t proc proc "$tree/proc"; mounted+=("$tree/proc")
in_tree setfiles -F -e /proc -e /sys \
    /etc/selinux/default/contexts/files/file_contexts / >>"$buildlog" 2>&1
umount "$tree/proc"; mounted=()
label=$(python3 -c 'import os, sys; print(os.getxattr(sys.argv[1], "security.selinux").decode().rstrip("\0"))' \
        "$tree/usr/sbin/libvirtd" 2>/dev/null || true)
case "$label" in
    *virtd_exec_t*) log "labelled (libvirtd: $label)" ;;
    *) log "labelling failed: /usr/sbin/libvirtd carries '$label'"; exit 1 ;;
esac
step_done label

# ---- 4. image -------------------------------------------------------------------------------------
step "mkfs.ext4 -d (size $image_size, sparse)"
cp "$tree"/boot/vmlinuz-* "$work/vmlinuz"
cp "$tree"/boot/initrd.img-* "$work/initrd.img"
truncate -s "$image_size" "$work/rootfs.img"
mkfs.ext4 -q -F -L vdnested -d "$tree" "$work/rootfs.img" >>"$buildlog" 2>&1
step_done mkfs
rm -rf "$tree"

nested_cache_publish "$work"
log "image ready in $dest ($(du -sh "$dest/rootfs.img" | cut -f1) used): $(tr '\n' ' ' <"$dest/timings.txt")"
echo "$dest"
