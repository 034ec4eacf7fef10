"""Kernel initiators in the nested test host: os-brick's ISCSIConnector against tgt on 127.0.0.1.

The host machine's kernel has no iSCSI initiator; the nested host's Debian kernel has
``iscsi_tcp``. tgt serves one LUN over a sparse file; os-brick (the project's version, from the
wheelhouse) logs in through open-iscsi and finds the SCSI disk, data written through the disk
reaches the file and the other way round, and disconnecting logs out and removes the disk.
Privileged calls run in-process (there is no sudo; see HOST.md).
"""

from __future__ import annotations

import mmap
import os
import secrets
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nested.conftest import run, stop_tgtd

pytestmark = pytest.mark.kernel_initiator

PORT = 3260
IQN = "iqn.2024-01.dev.virtdriver.nested:lun1"
BLOCK = 4096


def wait_until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {timeout} s")
        time.sleep(0.2)


def tgtadm(*args: str) -> str:
    return run("tgtadm", "--lld", "iscsi", *args)


@pytest.fixture
def tgt_lun(tmp_path: Path) -> Iterator[Path]:
    """tgtd on 127.0.0.1:3260 serving one 64 MiB LUN (lun 1) over a sparse file."""
    run("modprobe", "iscsi_tcp")
    backing = tmp_path / "lun1.raw"
    with open(backing, "wb") as fh:
        fh.truncate(64 << 20)
    proc = subprocess.Popen(["tgtd", "-f", "--iscsi", f"portal=127.0.0.1:{PORT}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: subprocess.run(["tgtadm", "--lld", "iscsi", "--mode", "target",
                                           "--op", "show"], capture_output=True).returncode == 0,
                   30, "tgtd answering")
        tgtadm("--mode", "target", "--op", "new", "--tid", "1", "-T", IQN)
        tgtadm("--mode", "logicalunit", "--op", "new", "--tid", "1", "--lun", "1",
               "-b", str(backing))
        tgtadm("--mode", "target", "--op", "bind", "--tid", "1", "-I", "ALL")
        yield backing
    finally:
        subprocess.run(["tgtadm", "--lld", "iscsi", "--mode", "target", "--op", "delete",
                        "--force", "--tid", "1"], capture_output=True)
        stop_tgtd(proc)


@pytest.fixture
def iscsi_connector(tmp_path: Path):
    """os-brick's ISCSIConnector with privileged calls in this process and a lock path."""
    import os_brick
    import os_brick.privileged
    from os_brick.initiator import connector
    from oslo_config import cfg

    locks = tmp_path / "locks"
    locks.mkdir()
    cfg.CONF.set_override("lock_path", str(locks), group="oslo_concurrency")
    os_brick.setup(cfg.CONF)
    os_brick.privileged.default.set_client_mode(False)
    yield connector.InitiatorConnector.factory("ISCSI", None, use_multipath=False,
                                               device_scan_attempts=5)
    cfg.CONF.clear_override("lock_path", group="oslo_concurrency")


def sessions() -> str:
    done = subprocess.run(["iscsiadm", "-m", "session"], capture_output=True, text=True)
    return done.stdout


def test_os_brick_iscsi_connect_and_disconnect(tgt_lun, iscsi_connector) -> None:
    from importlib.metadata import version

    assert version("os-brick")  # the wheelhouse's os-brick, not Debian's python3-os-brick
    import os_brick

    assert "/usr/lib/python3/dist-packages" not in os_brick.__file__, os_brick.__file__
    assert IQN not in sessions()
    props = {"target_portal": f"127.0.0.1:{PORT}", "target_iqn": IQN, "target_lun": 1,
             "volume_id": str(uuid.uuid4())}
    info = iscsi_connector.connect_volume(props)
    try:
        path = info["path"]
        real = os.path.realpath(path)
        disk = Path(real).name
        assert disk.startswith("sd"), (path, real)
        assert IQN in sessions()
        assert int(Path(f"/sys/block/{disk}/size").read_text()) * 512 == 64 << 20

        # Through the kernel's disk into tgt's file ...
        pattern = secrets.token_bytes(BLOCK)
        offset = secrets.randbelow(1000) * BLOCK
        fd = os.open(real, os.O_RDWR | os.O_DIRECT)
        try:
            buf = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT wants
            buf[:] = pattern
            assert os.pwritev(fd, [buf], offset) == BLOCK
            os.fsync(fd)
        finally:
            os.close(fd)
        with open(tgt_lun, "rb") as fh:
            fh.seek(offset)
            assert fh.read(BLOCK) == pattern
        # ... and from the file back through the disk (O_DIRECT: no page cache in between).
        other = secrets.token_bytes(BLOCK)
        with open(tgt_lun, "r+b") as fh:
            fh.seek(offset + BLOCK)
            fh.write(other)
            fh.flush()
            os.fsync(fh.fileno())
        fd = os.open(real, os.O_RDONLY | os.O_DIRECT)
        try:
            buf = mmap.mmap(-1, BLOCK)
            assert os.preadv(fd, [buf], offset + BLOCK) == BLOCK
            assert buf[:] == other
        finally:
            os.close(fd)
    finally:
        iscsi_connector.disconnect_volume(props, info)
    wait_until(lambda: IQN not in sessions(), 30, "the iSCSI session gone")
    wait_until(lambda: not Path(f"/sys/block/{disk}").exists(), 30, f"/dev/{disk} gone")
    assert not os.path.exists(path)


def lun_info(vid: str | None = None, **data: object) -> dict:
    """The test LUN as a multiattach iSCSI volume's connection_info (a new volume id unless
    ``vid``); ``data`` adds to its ``data`` or replaces a part (CHAP, other targets)."""
    vid = vid or str(uuid.uuid4())
    return {"driver_volume_type": "iscsi", "serial": vid, "multiattach": True,
            "data": {"volume_id": vid, "target_iqn": IQN, "target_portal": f"127.0.0.1:{PORT}",
                     "target_lun": 1, **data}}


def share_lun(volume_driver, a, b, info: dict | None = None  # type: ignore[no-untyped-def]
              ) -> tuple[dict, str, str]:
    """The test LUN (or the volume of ``info``) as one multiattach volume through the driver,
    rw in ``a`` and ro in ``b``: its connection_info, volume id and disk alias."""
    info = lun_info() if info is None else info
    vid = info["data"]["volume_id"]
    volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    volume_driver.attach_volume(info, b.name(), attach_mode="ro")
    return info, vid, f"ua-{vid}"


def test_kernel_iscsi_multiattach_through_the_driver(tgt_lun, guests, volume_driver) -> None:
    """One iSCSI volume through the kernel initiator, shared by two guests via
    ``LibvirtVolumeDriver``: the session stays while any guest uses it, goes with the last.
    Under SELinux, the disk (a kernel SCSI device) carries the shared image label in both
    guests' namespaces."""
    from testhosts.guests import ReadOnlyWrite, block_info, read_pattern, write_pattern
    from tests.nested.conftest import NESTED, qemu_pid, split_context

    a, b = guests.start("a"), guests.start("b")
    info, vid, alias = share_lun(volume_driver, a, b)
    assert IQN in sessions()
    assert not block_info(a, alias).ro and block_info(b, alias).ro
    source = block_info(a, alias).file
    assert source.startswith("/dev/"), source
    disk = Path(os.path.realpath(source)).name
    assert disk.startswith("sd"), (source, disk)

    if NESTED == "selinux":
        for dom in (a, b):
            out = run("nsenter", "-t", str(qemu_pid(dom)), "-m", "--", "stat", "-L", "-c", "%C",
                      source).strip()
            _, _, typ, level = split_context(out)
            assert (typ, level) == ("svirt_image_t", "s0"), (dom.name(), out)

    pattern = secrets.randbelow(200) + 20
    offset = secrets.randbelow(1000) * BLOCK
    write_pattern(a, alias, pattern, offset=offset)
    assert read_pattern(b, alias, pattern, offset=offset)
    with pytest.raises(ReadOnlyWrite):
        write_pattern(b, alias, 0x01, offset=offset)
    with open(tgt_lun, "rb") as fh:  # it reached the target's file
        fh.seek(offset)
        assert fh.read(BLOCK) == bytes([pattern]) * BLOCK

    volume_driver.detach_volume(a.name(), vid)
    assert IQN in sessions(), "detaching A logged out the session B still uses"
    assert read_pattern(b, alias, pattern, offset=offset)
    volume_driver.detach_volume(b.name(), vid)
    wait_until(lambda: IQN not in sessions(), 30, "the iSCSI session gone after the last detach")
    wait_until(lambda: not Path(f"/sys/block/{disk}").exists(), 30, f"/dev/{disk} gone")
    assert volume_driver.records.connected() == []


def test_kernel_iscsi_online_extend(tgt_lun, guests, volume_driver) -> None:
    """Grow the LUN's file (tgt reads a LUN's size when it is added: the LUN is re-added over
    the grown file, the session stays); virtdriver's extend rescans through os-brick once for
    the host and resizes both guests' QEMU: query-block shows the new size."""
    from testhosts.guests import block_info

    a, b = guests.start("a"), guests.start("b")
    info, vid, alias = share_lun(volume_driver, a, b)
    assert block_info(a, alias).raw["inserted"]["image"]["virtual-size"] == 64 << 20
    new = 96 << 20
    with open(tgt_lun, "r+b") as fh:
        fh.truncate(new)
    tgtadm("--mode", "logicalunit", "--op", "delete", "--tid", "1", "--lun", "1")
    tgtadm("--mode", "logicalunit", "--op", "new", "--tid", "1", "--lun", "1", "-b", str(tgt_lun))
    result = volume_driver.extend_volume_on_host(info)
    assert result.size == new and result.complete, result.to_json()
    for dom in (a, b):
        assert block_info(dom, alias).raw["inserted"]["image"]["virtual-size"] == new, dom.name()
    volume_driver.detach_volume(a.name(), vid)
    volume_driver.detach_volume(b.name(), vid)
    wait_until(lambda: IQN not in sessions(), 30, "the iSCSI session gone after the last detach")
