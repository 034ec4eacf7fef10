"""Multipath through the kernel in the nested test host (issue #31).

tgt serves one LUN on every local address; the connection_info names two portals (127.0.0.1 and
127.0.0.2, port 3260). With the host option ``use_multipath`` os-brick logs in on both and the
guests get the multipath device. One path is cut with a route (removing 127.0.0.2 from ``lo``
would cut nothing: all of 127.0.0.0/8 stays local), checked to be really unreachable; the
guests' I/O goes on through the other path; the path comes back; the last detach removes the map
and both sessions.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nested.conftest import run, stop_tgtd
from tests.nested.test_kernel_iscsi import BLOCK, lun_info, share_lun, wait_until

pytestmark = pytest.mark.kernel_initiator

PORT = 3260
IQN = "iqn.2024-01.dev.virtdriver.nested:mpath1"
PORTALS = ("127.0.0.1", "127.0.0.2")
CUT = ["blackhole", "127.0.0.2/32", "table", "local"]
MULTIPATH_CONF = """\
defaults {
    user_friendly_names no
    find_multipaths no
}
blacklist {
    devnode "^vd[a-z]"
}
"""


def sessions() -> list[str]:
    out = subprocess.run(["iscsiadm", "-m", "session"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if IQN in ln]


def maps() -> str:
    return subprocess.run(["dmsetup", "ls", "--target", "multipath"], capture_output=True,
                          text=True).stdout.strip()


def path_states() -> str:
    """multipathd's path table (columns dm_st active|failed, chk_st ready|faulty, ...)."""
    return run("multipathd", "show", "paths", check=False)


def both_paths_info() -> dict:
    """The LUN as one multiattach volume reached through both portals."""
    portals = [f"{p}:{PORT}" for p in PORTALS]
    return lun_info(target_iqn=IQN, target_portal=portals[0], target_iqns=[IQN, IQN],
                    target_portals=portals, target_luns=[1, 1])


def reachable(address: str) -> bool:
    try:
        with socket.create_connection((address, PORT), timeout=3):
            return True
    except OSError:
        return False


@pytest.fixture
def multipathd() -> Iterator[None]:
    run("modprobe", "dm_multipath")
    conf = Path("/etc/multipath.conf")
    saved = conf.read_text() if conf.exists() else None
    conf.write_text(MULTIPATH_CONF)
    subprocess.run(["systemctl", "unmask", "multipathd.service", "multipathd.socket"],
                   capture_output=True)
    run("systemctl", "start", "multipathd.service")
    wait_until(lambda: subprocess.run(["multipathd", "show", "daemon"], capture_output=True)
               .returncode == 0, 60, "multipathd answering")
    try:
        yield
    finally:
        subprocess.run(["systemctl", "stop", "multipathd.service", "multipathd.socket"],
                       capture_output=True)
        subprocess.run(["multipath", "-F"], capture_output=True)
        if saved is None:
            conf.unlink()
        else:
            conf.write_text(saved)


@pytest.fixture
def two_portal_lun(tmp_path: Path) -> Iterator[Path]:
    """tgtd on every local address, port 3260, one 64 MiB LUN (lun 1) over a sparse file."""
    run("modprobe", "iscsi_tcp")
    backing = tmp_path / "mpath.raw"
    with open(backing, "wb") as fh:
        fh.truncate(64 << 20)
    proc = subprocess.Popen(["tgtd", "-f"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tgtadm = ["tgtadm", "--lld", "iscsi"]
    try:
        wait_until(lambda: subprocess.run([*tgtadm, "--mode", "target", "--op", "show"],
                                          capture_output=True).returncode == 0,
                   30, "tgtd answering")
        run(*tgtadm, "--mode", "target", "--op", "new", "--tid", "1", "-T", IQN)
        run(*tgtadm, "--mode", "logicalunit", "--op", "new", "--tid", "1", "--lun", "1",
            "-b", str(backing))
        run(*tgtadm, "--mode", "target", "--op", "bind", "--tid", "1", "-I", "ALL")
        assert all(reachable(a) for a in PORTALS)
        yield backing
    finally:
        subprocess.run(["ip", "route", "del", *CUT], capture_output=True)
        subprocess.run([*tgtadm, "--mode", "target", "--op", "delete", "--force", "--tid", "1"],
                       capture_output=True)
        stop_tgtd(proc)


def test_multipath_shared_volume_survives_a_path_loss(two_portal_lun, multipathd, guests,
                                                      tmp_path) -> None:
    from testhosts.guests import SYSTEM_URI, ReadOnlyWrite, block_info, read_pattern, write_pattern
    from virtdriver import LibvirtVolumeDriver

    driver = LibvirtVolumeDriver(SYSTEM_URI, state_dir=tmp_path / "state", detach_timeout=20,
                                 use_multipath=True)
    try:
        a, b = guests.start("a"), guests.start("b")
        info, vid, alias = share_lun(driver, a, b, both_paths_info())
        assert len(sessions()) == 2, sessions()
        source = block_info(a, alias).file
        assert block_info(b, alias).file == source
        dm = Path(os.path.realpath(source)).name
        assert dm.startswith("dm-"), (source, dm)
        slaves = sorted(os.listdir(f"/sys/block/{dm}/slaves"))
        assert len(slaves) == 2 and all(s.startswith("sd") for s in slaves), slaves
        assert not block_info(a, alias).ro and block_info(b, alias).ro

        def io_round() -> tuple[int, int]:
            pattern = secrets.randbelow(200) + 20
            offset = secrets.randbelow(1000) * BLOCK
            write_pattern(a, alias, pattern, offset=offset)
            assert read_pattern(b, alias, pattern, offset=offset)
            with open(two_portal_lun, "rb") as fh:
                fh.seek(offset)
                assert fh.read(BLOCK) == bytes([pattern]) * BLOCK
            return pattern, offset

        io_round()
        with pytest.raises(ReadOnlyWrite):
            write_pattern(b, alias, 0x01)

        # Cut the path to 127.0.0.2 and make sure it is really cut.
        run("ip", "route", "add", *CUT)
        assert not reachable("127.0.0.2"), "the route did not cut 127.0.0.2:3260"
        assert reachable("127.0.0.1")
        io_round()  # the I/O goes on while the path is failing
        wait_until(lambda: "failed" in path_states() or "faulty" in path_states(), 180,
                   "multipathd seeing the cut path as failed")
        io_round()
        assert maps(), "the map went away with one path"

        # The path comes back.
        run("ip", "route", "del", *CUT)
        assert reachable("127.0.0.2")
        wait_until(lambda: "failed" not in path_states() and "faulty" not in path_states()
                   and path_states().count("active") >= 2, 180, "both paths active again")
        pattern, offset = io_round()

        driver.detach_volume(a.name(), vid)
        assert len(sessions()) == 2 and maps(), "detaching A tore down what B still uses"
        assert read_pattern(b, alias, pattern, offset=offset)
        driver.detach_volume(b.name(), vid)
        wait_until(lambda: sessions() == [], 60, "both sessions gone after the last detach")
        wait_until(lambda: maps() == "" or "No devices" in maps(), 60, "the map removed")
        assert not Path(f"/sys/block/{dm}").exists()
        assert driver.records.connected() == []
    finally:
        driver.close()


def test_multipath_online_extend(two_portal_lun, multipathd, guests, tmp_path) -> None:
    """The LUN grows (re-added over the grown file, both sessions stay); virtdriver's extend
    rescans both paths and resizes the map through os-brick (multipathd), and both guests'
    QEMU see the new size in query-block."""
    from testhosts.guests import SYSTEM_URI, block_info
    from virtdriver import LibvirtVolumeDriver

    driver = LibvirtVolumeDriver(SYSTEM_URI, state_dir=tmp_path / "state", detach_timeout=20,
                                 use_multipath=True)
    try:
        a, b = guests.start("a"), guests.start("b")
        info, vid, alias = share_lun(driver, a, b, both_paths_info())
        dm = Path(os.path.realpath(block_info(a, alias).file)).name
        assert dm.startswith("dm-"), dm
        assert block_info(a, alias).raw["inserted"]["image"]["virtual-size"] == 64 << 20
        new = 96 << 20
        with open(two_portal_lun, "r+b") as fh:
            fh.truncate(new)
        tgt = ["--lld", "iscsi", "--mode", "logicalunit", "--tid", "1", "--lun", "1"]
        run("tgtadm", *tgt, "--op", "delete")
        run("tgtadm", *tgt, "--op", "new", "-b", str(two_portal_lun))
        result = driver.extend_volume_on_host(info)
        assert result.size == new and result.complete, json.dumps(result.to_json(), indent=1)
        assert int(Path(f"/sys/block/{dm}/size").read_text()) * 512 == new
        for dom in (a, b):
            assert block_info(dom, alias).raw["inserted"]["image"]["virtual-size"] == new
        driver.detach_volume(a.name(), vid)
        driver.detach_volume(b.name(), vid)
        wait_until(lambda: sessions() == [], 60, "both sessions gone after the last detach")
    finally:
        driver.close()
