"""What os-brick would fail slowly or silently is refused at once, before any connect (#47).

os-brick older than 6.10 ignores ``enforce_multipath`` at connect, and a connector below its
protocol's floor waits out its scan timeouts and says "device not found". The driver checks
multipathd and the os-brick version itself, in one line, before anything is set up.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from tests.conftest import FIXTURES
from virtdriver import LibvirtVolumeDriver
from virtdriver.errors import HostConnectFailed
from virtdriver.volume import probes

pytestmark = pytest.mark.hypervisor


def _iscsi() -> dict:
    info = json.loads((FIXTURES / "connection_info" / "iscsi-multiattach.json").read_text())
    vid = str(uuid.uuid4())
    info["serial"] = info["data"]["volume_id"] = vid
    info["data"]["target_portal"] = "127.0.0.1:3260"
    del info["data"]["device_path"]
    return info


def test_an_enforced_multipath_attach_without_multipathd_is_refused_at_once(guests,
                                                                           tmp_path) -> None:
    assert probes.running("multipathd") is None, "this test needs a host without multipathd"
    dom = guests.start("mp")
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state",
                                 use_multipath=True, enforce_multipath=True)
    info = _iscsi()
    started = time.monotonic()
    with pytest.raises(HostConnectFailed, match="multipathd is not running, and "
                                                "enforce_multipath refuses a single-path"):
        driver.attach_volume(info, dom.name())
    assert time.monotonic() - started < 30  # no scan timeout was waited out
    assert driver.records.connected() == [] and info["serial"] not in dom.XMLDesc(0)


def test_nvmeof_below_the_os_brick_floor_names_the_floor(guests, tmp_path, mocker) -> None:
    # Two os-bricks cannot be installed side by side: the version read is the seam.
    mocker.patch.object(probes, "os_brick_version", return_value="6.1.0")
    dom = guests.start("nv")
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state")
    vid = str(uuid.uuid4())
    info = {"driver_volume_type": "nvmeof", "serial": vid,
            "data": {"volume_id": vid, "target_nqn": "nqn.2014-08.org.nvmexpress:uuid:0",
                     "transport_type": "tcp", "portals": [["127.0.0.1", 4420, "tcp"]]}}
    with pytest.raises(HostConnectFailed, match=r"os-brick 6\.1\.0 cannot connect nvmeof "
                                                r"volumes here; 6\.6\.0 or later can"):
        driver.attach_volume(info, dom.name())
    assert driver.records.connected() == [] and vid not in dom.XMLDesc(0)
