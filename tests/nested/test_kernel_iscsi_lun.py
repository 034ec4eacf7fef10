"""``device='lun'`` on a kernel iSCSI disk: libvirt's managed ``qemu-pr-helper`` for the guest.

virtdriver renders ``<reservations managed='yes'/>`` for a SCSI LUN passed through from a host
block device: QEMU lacks CAP_SYS_RAWIO, which PERSISTENT RESERVE OUT needs, so libvirt starts a
``qemu-pr-helper`` per guest that sends it for QEMU. The guests here have no OS to send
reservation commands; what this shows is the plumbing: the helper runs for the guest, listening
on the socket the live XML names, QEMU is connected to it (QMP ``query-pr-managers``), a cold
start puts ``-object pr-manager-helper`` on QEMU's command line, the LUN carries data, and the
helper goes with the disk.
"""

from __future__ import annotations

import json
import secrets
import uuid
from pathlib import Path

import libvirt_qemu
import pytest
from lxml import etree

from tests.nested.conftest import qemu_pid
from tests.nested.test_kernel_iscsi import BLOCK, IQN, PORT, sessions, tgt_lun, wait_until

pytestmark = pytest.mark.kernel_initiator
__all__ = ["tgt_lun"]  # the fixture, used by name


def helpers_on(socket: str) -> list[int]:
    """Pids of qemu-pr-helper processes serving ``socket``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"qemu-pr-helper") and socket.encode() in argv:
            found.append(int(proc.name))
    return found


def pr_managers(dom) -> list[dict]:
    reply = json.loads(libvirt_qemu.qemuMonitorCommand(dom, '{"execute":"query-pr-managers"}', 0))
    return reply["return"]


def lun_socket(dom, alias: str) -> str:
    live = etree.fromstring(dom.XMLDesc(0).encode())
    disk = live.find(f"./devices/disk/alias[@name='{alias}']/..")
    assert disk is not None and (disk.get("type"), disk.get("device")) == ("block", "lun")
    res = disk.find("./source/reservations")
    assert res is not None and res.get("managed") == "yes", etree.tostring(disk).decode()
    return res.find("./source").get("path")  # libvirt fills in the managed helper's socket


def test_kernel_iscsi_lun_gets_a_managed_pr_helper(tgt_lun, guests, volume_driver) -> None:
    from testhosts.guests import read_pattern, write_pattern

    dom = guests.start("lun")
    vid = str(uuid.uuid4())
    alias = f"ua-{vid}"
    info = {"driver_volume_type": "iscsi", "serial": vid,
            "data": {"volume_id": vid, "target_iqn": IQN,
                     "target_portal": f"127.0.0.1:{PORT}", "target_lun": 1}}
    assert pr_managers(dom) == []
    volume_driver.attach_volume(info, dom.name(), device="lun", bus="scsi")
    assert IQN in sessions()

    socket = lun_socket(dom, alias)
    assert len(helpers_on(socket)) == 1, socket
    assert [m["connected"] for m in pr_managers(dom)] == [True]

    pattern = secrets.randbelow(200) + 20
    offset = secrets.randbelow(1000) * BLOCK
    write_pattern(dom, alias, pattern, offset=offset)
    assert read_pattern(dom, alias, pattern, offset=offset)
    with open(tgt_lun, "rb") as fh:  # through scsi-block and the kernel's disk to tgt's file
        fh.seek(offset)
        assert fh.read(BLOCK) == bytes([pattern]) * BLOCK

    # Cold start from the persistent definition: the helper object is on QEMU's command line.
    dom.destroy()
    wait_until(lambda: not helpers_on(socket), 30, "the helper gone with the guest")
    dom.create()
    argv = Path(f"/proc/{qemu_pid(dom)}/cmdline").read_bytes().decode().split("\0")
    objects = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-object"]
    managers = [o for o in objects if "pr-manager-helper" in o]
    assert len(managers) == 1, argv
    socket = lun_socket(dom, alias)
    assert socket in managers[0], (managers, socket)
    assert "pr-manager" in " ".join(a for a in argv if a not in managers), argv  # the disk's
    assert len(helpers_on(socket)) == 1
    assert [m["connected"] for m in pr_managers(dom)] == [True]
    assert read_pattern(dom, alias, pattern, offset=offset)

    volume_driver.detach_volume(dom.name(), vid)
    wait_until(lambda: not helpers_on(socket), 30, "the helper gone with the last lun")
    assert pr_managers(dom) == []
    wait_until(lambda: IQN not in sessions(), 30, "the iSCSI session gone after the detach")
