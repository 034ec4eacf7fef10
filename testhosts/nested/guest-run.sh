#!/bin/bash
# Runs INSIDE the nested test host (started by the image's virtdriver-nested.service through
# /usr/local/sbin/virtdriver-nested-boot, after /dev/vdb was unpacked into /opt/vd). Everything
# it leaves in /results goes back to the host as a tar on /dev/vdc.
#
#   /opt/vd/nested.env   LSM=selinux|apparmor, PYTEST_ARGS=(...)
#   /opt/vd/project      the working tree;  /dev/vdd  its venv, made by the host
#
# Steps: record the LSM's state, unpack the venv the host made (the project editable in it),
# configure and start libvirtd with the LSM's security driver, run pytest ONCE (each process
# start costs seconds under TCG), collect audit, LSM status and libvirt logs.
set -u
R=/results
P=/opt/vd
mkdir -p "$R"
# shellcheck disable=SC1091
source "$P/nested.env"
stamp() { cut -d' ' -f1 /proc/uptime; }
say() { echo "vdnested: [$(stamp) s] $*"; }
step_t=0
step() { step_t=$(stamp); say "$*"; }
step_done() { echo "$1 $(awk -v a="$step_t" -v b="$(stamp)" 'BEGIN{printf "%.1f", b-a}')" >>"$R/timings.txt"; }
echo "boot $(stamp)" >"$R/timings.txt"

cat /sys/kernel/security/lsm >"$R/lsm.txt" 2>&1; echo >>"$R/lsm.txt"
uname -a >"$R/uname.txt"
case "$LSM" in
    selinux)
        sestatus >"$R/sestatus.txt" 2>&1
        mode="SELinux: $(getenforce 2>/dev/null | tr '[:upper:]' '[:lower:]')"
        mode+=" (policy $(sestatus | awk -F': *' '/Loaded policy name/ {print $2}'))"
        ;;
    apparmor)
        aa-status >"$R/aa-status-boot.txt" 2>&1
        mode="AppArmor: $(cat /sys/module/apparmor/parameters/enabled 2>/dev/null | sed 's/Y/enabled/;s/N/disabled/')"
        mode+=", $(aa-status --enforced 2>/dev/null || echo '?') profiles in enforce mode"
        ;;
esac
mode+=", LSMs $(cat /sys/kernel/security/lsm)"
echo "$mode" >"$R/mode.txt"
say "$mode"

# ---- venv ----------------------------------------------------------------------------------------
step "venv: the one the host made (build-wheelhouse.sh), /dev/vdd read-only at /opt/vd/venv"
# Under SELinux every file of the disk is labelled as /usr's are (it carries no labels).
opts=ro
[ "$LSM" = selinux ] && opts+=",context=system_u:object_r:usr_t:s0"
mkdir -p /opt/vd/venv
if ! mount -o "$opts" /dev/vdd /opt/vd/venv || ! /opt/vd/venv/bin/python -c 'import virtdriver'
then
    say "the prebuilt venv does not work here"
    exit 1
fi
step_done venv

# ---- libvirt -------------------------------------------------------------------------------------
step "libvirt: security_driver = \"$LSM\", QEMU as the default user (libvirt-qemu)"
cat >>/etc/libvirt/qemu.conf <<EOF
# virtdriver nested test host
security_driver = "$LSM"
EOF
# No idle timeout (Debian's default --timeout 120 would stop it between tests).
echo 'LIBVIRTD_ARGS=""' >/etc/default/libvirtd
# QEMU's capabilities, probed by an earlier boot of this image (run.sh keeps them beside the
# image): libvirtd re-validates them against the binary and skips its probe (about a minute).
caps=/var/cache/libvirt/qemu/capabilities
if [ -d "$P/qemu-caps" ]; then
    mkdir -p "$caps"
    cp "$P"/qemu-caps/*.xml "$caps/" 2>/dev/null && say "seeded QEMU capabilities from an earlier boot"
fi
systemctl start virtlogd.socket libvirtd.service
for _ in $(seq 1 300); do
    virsh -q -c qemu:///system uri >/dev/null 2>&1 && break
    sleep 0.2
done
virsh -c qemu:///system capabilities >"$R/capabilities.xml" 2>&1
grep -A2 '<secmodel>' "$R/capabilities.xml" | grep '<model>' | sed 's/ *<[/]*model>//g' \
    | tr '\n' ' ' | sed 's/^/libvirt secmodels: /' | tee "$R/secmodels.txt"; echo
step_done libvirtd
mkdir -p "$R/qemu-caps"
cp "$caps"/*.xml "$R/qemu-caps/" 2>/dev/null

if [ "$LSM" = selinux ]; then
    getsebool -a >"$R/booleans.txt" 2>&1
    semodule -l 2>/dev/null | grep -x virtdriver_nested >>"$R/booleans.txt"
fi

# ---- pytest, one process ---------------------------------------------------------------------------
step "pytest ${PYTEST_ARGS[*]}"
cd "$P/project" || exit 1
export VIRTDRIVER_NESTED="$LSM" CI=1 PYTHONDONTWRITEBYTECODE=1
/opt/vd/venv/bin/python -m pytest -p no:cacheprovider --junitxml="$R/junit.xml" --durations=25 \
    "${PYTEST_ARGS[@]}" 2>&1 | tee "$R/pytest.txt"
rc=${PIPESTATUS[0]}
echo "$rc" >"$R/pytest-exit"
step_done pytest
say "pytest exit $rc"

# ---- what the LSM and libvirt saw --------------------------------------------------------------
step "collecting logs"
case "$LSM" in
    selinux)
        ausearch -m AVC,USER_AVC,SELINUX_ERR -i >"$R/avc.txt" 2>&1
        sestatus -b >"$R/sestatus-end.txt" 2>&1
        ;;
    apparmor)
        aa-status >"$R/aa-status.txt" 2>&1
        ausearch -m AVC,USER_AVC -i >"$R/apparmor-audit.txt" 2>&1
        grep 'apparmor="DENIED"' "$R/apparmor-audit.txt" >"$R/apparmor-denials.txt"
        ;;
esac
cp /var/log/audit/audit.log "$R/audit.log" 2>/dev/null
mkdir -p "$R/libvirt"
cp -r /var/log/libvirt/. "$R/libvirt/" 2>/dev/null
journalctl -b --no-pager -o short-monotonic >"$R/journal.txt" 2>&1
dmesg >"$R/dmesg.txt" 2>&1
step_done collect
exit 0
