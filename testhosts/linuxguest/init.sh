#!/bin/busybox sh
# PID 1 of the test guest: mount, load the modules the builder listed, serve the command port.
# Protocol on the virtio-serial port named vd.cmd: the host sends "ID BASE64-SCRIPT\n"; the
# guest runs the script with sh and answers "BEGIN ID", its output (stdout+stderr) in base64,
# "END ID EXIT-CODE".
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mkdir -p /proc /sys /dev /tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
while read -r mod; do insmod "/lib/modules/$mod" || echo "linuxguest: insmod $mod failed"; done \
    < /lib/modules/load.order
port=
n=0
while [ -z "$port" ]; do
    for p in /sys/class/virtio-ports/*; do
        [ "$(cat "$p/name" 2>/dev/null)" = vd.cmd ] && [ -e "/dev/${p##*/}" ] && port=/dev/${p##*/}
    done
    [ -z "$port" ] && { n=$((n + 1)); [ $n = 100 ] && ls -l /sys/class/virtio-ports/; sleep 0.1; }
done
echo "linuxguest: ready on $port"
serve() {
    while read -r id script; do
        echo "$script" | base64 -d > /tmp/cmd
        sh /tmp/cmd > /tmp/out 2>&1 < /dev/null
        rc=$?
        echo "BEGIN $id"
        base64 < /tmp/out
        echo "END $id $rc"
    done
}
# A virtio port opens once (a second open is EBUSY): one read-write descriptor. read returns
# at once while no host is connected to the port: retry gently.
# PID 1 must never exit (the kernel would panic): nothing below may end the shell.
while ! exec 3<>"$port"; do sleep 1; done
while :; do serve <&3 >&3; sleep 0.2; done
