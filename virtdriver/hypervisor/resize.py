"""Showing a grown volume to a running guest's QEMU, read-write and read-only attachments alike.

Read-write: libvirt's block resize (QMP ``block_resize``): QEMU truncates down the node chain and
then tells the guest device (SCSI "capacity data has changed", a virtio-blk config change).

Read-only: libvirt refuses (``can't resize empty or readonly disk``), and so would QEMU 7.2:
``bdrv_co_truncate`` refuses a read-only node, and the RESIZE permission makes file-posix reopen
the protocol node ``O_RDWR``, which libvirt's device cgroup denies a read-only disk (``Could not
open '/dev/loopN': Operation not permitted``, measured). A ``host_device``/``file`` node reads its
size only when it is opened (``bdrv_open_driver`` -> ``refresh_total_sectors``: neither driver has
``has_variable_length``), and ``blockdev-reopen`` with the same options keeps the cached size
(measured). So the protocol node is opened anew, read-only, on the same path: ``blockdev-add`` of
a second node, ``blockdev-reopen`` of the format node onto it (drained for a moment; the guest
device and its format node stay), then the same once more under libvirt's own node name, so that
libvirt's later detach, block copy or migration find the nodes it named. Where the protocol node
is the device's root (libvirt 10 and later give a plain raw disk no format node), the device
itself is moved to the second node (``qom-set`` of its ``drive``), and back. The nodes' options
are libvirt's own for this disk (``virConnectDomainXMLToNative``), so only the size changes.

The guest device is not told: QEMU 7.2 signals a size change to a device only after a truncate or
a write past the end (``bdrv_parent_cb_resize``), neither possible read-only. QEMU answers the
guest's next capacity read with the new size (a Linux SCSI disk: ``echo 1 >
/sys/class/block/DISK/device/rescan`` inside the guest).

QMP goes through ``virDomainQemuMonitorCommand``: libvirt marks the guest tainted
(``custom-monitor``), a note in its log, nothing else.
"""

from __future__ import annotations

import json
import secrets
import shlex
from dataclasses import dataclass
from typing import Any

import libvirt
import libvirt_qemu

from virtdriver.config import Disk
from virtdriver.errors import HypervisorError
from virtdriver.hypervisor.connection import libvirt_message

REOPENABLE = ("host_device", "file")  # protocol nodes whose size is read when they are opened


@dataclass(frozen=True)
class Resized:
    """What one guest's QEMU shows after a resize."""

    size: int  # bytes, as QEMU reports the disk now
    how: str  # "resized" (block resize) or "reopened" (read-only node opened anew)
    guest_notified: bool  # QEMU told the guest device (False: it sees it on its next read)


def resize_disk(dom: libvirt.virDomain, disk: Disk, new_size: int) -> Resized:
    """Make ``dom``'s QEMU show ``disk`` (a live disk of ``dom``) at ``new_size`` bytes."""
    target = disk.target.dev if disk.target is not None and disk.target.dev else ""
    if not disk.readonly:
        try:
            dom.blockResize(target, new_size, libvirt.VIR_DOMAIN_BLOCK_RESIZE_BYTES)
            return Resized(int(dom.blockInfo(target)[0]), "resized", True)
        except libvirt.libvirtError as exc:
            raise HypervisorError(f"QEMU refused to resize {target} of {dom.name()}",
                                  libvirt_message(exc)) from None
    return Resized(reopen_storage(dom, disk), "reopened", False)


# ---- a read-only disk: its protocol node opened anew ----------------------------------------


def reopen_storage(dom: libvirt.virDomain, disk: Disk) -> int:
    """Open the protocol node of read-only ``disk`` again; the size QEMU now shows."""
    alias = disk.alias.name if disk.alias is not None else ""
    device, root = _device_node(dom, alias)
    nodes = {n["node-name"]: n for n in _qmp(dom, "query-named-block-nodes", flat=True)}
    if nodes.get(root, {}).get("drv") in REOPENABLE:
        storage, fmt = root, None  # libvirt 10 and later: a raw disk is one protocol node
    else:
        storage, fmt = root.removesuffix("-format") + "-storage", root  # libvirt's own names
    node = nodes.get(storage)
    if node is None or node.get("drv") not in REOPENABLE:
        kind = f"a QEMU {node.get('drv')} disk" if node else "a disk without a protocol node"
        raise HypervisorError(f"read-only {alias} of {dom.name()} is {kind}: QEMU reads its size "
                              "only when it opens it, and virtdriver reopens read-only block "
                              "devices and files only")
    storage_props, format_props = libvirt_blockdev_props(dom.connect(), disk)

    def read_through(name: str) -> None:
        if fmt is None:  # the device itself moves to the node
            _qmp(dom, "qom-set", path=device, property="drive", value=name)
        else:
            _qmp(dom, "blockdev-reopen",
                 options=[dict(format_props or {}, **{"node-name": fmt, "file": name})])

    temporary = "vd-grow-" + secrets.token_hex(6)
    _qmp(dom, "blockdev-add", **dict(storage_props, **{"node-name": temporary}))
    try:
        read_through(temporary)
    except HypervisorError:
        _qmp(dom, "blockdev-del", **{"node-name": temporary})
        raise
    # The guest reads through the new node now; libvirt's name goes back to a node like it.
    try:
        _qmp(dom, "blockdev-del", **{"node-name": storage})
    except HypervisorError:
        read_through(storage)
        _qmp(dom, "blockdev-del", **{"node-name": temporary})
        raise
    try:
        _qmp(dom, "blockdev-add", **dict(storage_props, **{"node-name": storage}))
        read_through(storage)
    except HypervisorError as exc:
        raise HypervisorError(f"{alias} of {dom.name()} was reopened at its new size, but "
                              f"through QEMU node {temporary}, not libvirt's {storage}: libvirt "
                              "cannot detach it cleanly until the guest restarts",
                              exc.libvirt_message) from None
    _qmp(dom, "blockdev-del", **{"node-name": temporary})
    return _device_size(dom, alias)


def libvirt_blockdev_props(conn: libvirt.virConnect,
                           disk: Disk) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The ``-blockdev`` options libvirt gives ``disk``'s protocol node, and its format node if it
    has one, asked of libvirt itself (its command line for a domain holding only this disk)."""
    probe = ("<domain type='qemu'><name>virtdriver-probe</name><memory unit='MiB'>64</memory>"
             "<os><type>hvm</type></os><devices><controller type='scsi' model='virtio-scsi'/>"
             f"{disk.to_xml()}</devices></domain>")
    try:
        argv = shlex.split(conn.domainXMLToNative("qemu-argv", probe, 0))
    except libvirt.libvirtError as exc:
        raise HypervisorError("libvirt could not describe the disk's block nodes",
                              libvirt_message(exc)) from None
    nodes = [json.loads(arg) for opt, arg in zip(argv, argv[1:]) if opt == "-blockdev"]
    storages = [n for n in nodes if n.get("driver") in REOPENABLE]
    for storage in storages:
        for fmt in nodes:
            if fmt.get("file") == storage.get("node-name"):
                return _without_name(storage), _without_name(fmt)
    if len(storages) == 1 and len(nodes) == 1:
        return _without_name(storages[0]), None
    raise HypervisorError("libvirt gives the disk no protocol node to reopen")


def _without_name(props: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in props.items() if k not in ("node-name", "file")}


def _device_node(dom: libvirt.virDomain, alias: str | None) -> tuple[str, str]:
    """The guest device's QOM path and the block node at its root, as QEMU reports them."""
    for entry in _qmp(dom, "query-block"):
        if _is_device(entry, alias) and entry.get("inserted"):
            return str(entry["qdev"]), str(entry["inserted"]["node-name"])
    raise HypervisorError(f"QEMU of {dom.name()} has no block device {alias}")


def _device_size(dom: libvirt.virDomain, alias: str | None) -> int:
    for entry in _qmp(dom, "query-block"):
        if _is_device(entry, alias) and entry.get("inserted"):
            return int(entry["inserted"]["image"]["virtual-size"])
    raise HypervisorError(f"QEMU of {dom.name()} has no block device {alias}")


def _is_device(entry: dict[str, Any], alias: str | None) -> bool:
    # SCSI disks: "ua-x"; virtio-blk: "/machine/peripheral/ua-x/virtio-backend".
    qdev = str(entry.get("qdev", ""))
    return bool(alias) and (qdev == alias or alias in qdev.split("/"))


def _qmp(dom: libvirt.virDomain, command: str, **arguments: Any) -> Any:
    request = json.dumps({"execute": command, "arguments": arguments})
    try:
        reply = json.loads(libvirt_qemu.qemuMonitorCommand(dom, request, 0))
    except libvirt.libvirtError as exc:
        raise HypervisorError(f"QMP {command} on {dom.name()} failed",
                              libvirt_message(exc)) from None
    if "error" in reply:
        raise HypervisorError(f"QEMU of {dom.name()} refused {command}",
                              str(reply["error"].get("desc", reply["error"])))
    return reply.get("return")
