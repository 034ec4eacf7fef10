#!/usr/bin/env bash
# Prepare this machine for virtdriver: libvirt + QEMU from Debian, the users and
# directories libvirtd needs, the daemons (there is no systemd), and .venv with the
# project installed in editable mode with its test extra.  Idempotent.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"

log() { printf 'setup-host: %s\n' "$*" >&2; }

# python3-venv, python3-dev and gcc: a bare Debian 13 has none of them, and pip compiles
# libvirt-python against libvirt-dev; util-linux's blkid reads what a shared volume holds, and
# the filesystem guard's tests make ext4, xfs and gfs2 (e2fsprogs, xfsprogs, gfs2-utils)
packages=(libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients
          qemu-system-x86 qemu-utils qemu-block-extra libvirt-dev pkg-config
          libxml2-utils util-linux procps python3-venv python3-dev gcc
          e2fsprogs xfsprogs gfs2-utils)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    if [ "$(id -u)" != 0 ]; then log "need root to install: ${missing[*]}"; exit 1; fi
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "$(id -u)" = 0 ]; then
    getent group libvirt >/dev/null || groupadd --system libvirt
    getent group kvm >/dev/null || groupadd --system kvm
    getent group libvirt-qemu >/dev/null || groupadd --system libvirt-qemu
    id libvirt-qemu >/dev/null 2>&1 || useradd --system -g libvirt-qemu -G kvm \
        -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu
    mkdir -p /var/log/libvirt/qemu /var/run/libvirt /var/lib/libvirt/qemu /var/lib/libvirt/images
    conf=/etc/libvirt/qemu.conf configured=0
    if ! grep -q '^# virtdriver-managed' "$conf" 2>/dev/null; then
        log "configuring $conf (QEMU as root, no security driver)"
        configured=1
        {
            echo '# virtdriver-managed'
            echo 'user = "root"'
            echo 'group = "root"'
            echo 'security_driver = "none"'
        } >>"$conf"
    fi
    if [ -d /run/systemd/system ]; then
        # systemd runs: its units (socket-activated on Debian 13), not daemons of our own
        systemctl enable --now virtlogd.socket libvirtd.socket >/dev/null 2>&1 \
            || systemctl start virtlogd.service libvirtd.service
        [ "$configured" = 0 ] || systemctl try-restart libvirtd.service  # the new qemu.conf
    else
        # ours by its pid file in this /run, not by name: a daemon of another namespace (the
        # host's, beside a container or the debian13 stack) is seen by pgrep but serves no /run
        running() { local p; p=$(cat "/run/$1.pid" 2>/dev/null) && [ -n "$p" ] \
            && [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$1" ]; }
        running virtlogd || { log "starting virtlogd"; virtlogd -d; }
        if ! running libvirtd; then
            log "starting libvirtd"
            libvirtd -d
        fi
    fi
    for _ in $(seq 1 100); do
        [ -S /var/run/libvirt/libvirt-sock ] && break
        sleep 0.1
    done
    [ -S /var/run/libvirt/libvirt-sock ] || { log "libvirtd did not come up"; exit 1; }
fi

if [ ! -x .venv/bin/python ]; then
    log "creating .venv"
    python3 -m venv .venv
fi
stamp=.venv/.virtdriver-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    log "installing virtdriver[test] into .venv"
    log_file=.venv/install.log
    if ! { .venv/bin/pip install -q --upgrade pip && .venv/bin/pip install -q -e ".[test,bench]"; } \
            >"$log_file" 2>&1; then
        cat "$log_file" >&2
        exit 1
    fi
    touch "$stamp"
fi
log "ready"
