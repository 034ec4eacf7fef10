"""An attachment's own cache and error policies on real guests (#45, item 4): what QEMU opens,
what ``list`` shows, and that a swap keeps them."""

from __future__ import annotations

import json
import subprocess
import sys

import libvirt
import pytest
from lxml import etree

from testhosts.guests import LoopDevice, block_info
from tests.support.volumes import local_volume

pytestmark = pytest.mark.hypervisor

MIB = 1 << 20


def _driver_element(dom: libvirt.virDomain, alias: str, flags: int = 0) -> dict[str, str]:
    root = etree.fromstring(dom.XMLDesc(flags))
    disk = next(d for d in root.iter("disk") if d.find(f"alias[@name='{alias}']") is not None)
    return dict(disk.find("driver").attrib)


def test_directsync_and_report_reach_qemu_and_list(guests, volume_driver) -> None:
    a, b = guests.start("io-a"), guests.start("io-b")
    with LoopDevice(16 * MIB) as loop:
        info = local_volume(loop.device, multiattach=True)
        vid = info["data"]["volume_id"]
        made = volume_driver.attach_volume_to_many(info, [a.name(), b.name()],
                                                   cache="directsync", error_policy="report",
                                                   rerror_policy="stop")
        assert [(m.cache, m.error_policy, m.rerror_policy) for m in made] == [
            ("directsync", "report", "stop")] * 2
        for dom in (a, b):
            seen = block_info(dom, f"ua-{vid}")
            assert seen.direct and not seen.writeback  # QEMU's directsync: O_DIRECT, no cache
            assert {k: v for k, v in _driver_element(dom, f"ua-{vid}").items()
                    if k in ("cache", "error_policy", "rerror_policy")} == {
                "cache": "directsync", "error_policy": "report", "rerror_policy": "stop"}
            # in the definition too, for the guest's next start
            defined = _driver_element(dom, f"ua-{vid}", libvirt.VIR_DOMAIN_XML_INACTIVE)
            assert defined["cache"] == "directsync" and defined["error_policy"] == "report"
        listed = subprocess.run([sys.executable, "-m", "virtdriver", "--connect",
                                 "qemu:///system", "list", a.name()], capture_output=True,
                                text=True, check=True, timeout=120).stdout.splitlines()
        assert listed[0].split()[:7] == ["Device", "Volume", "Mode", "Shareable", "Cache",
                                         "Errors", "Source"]
        assert "directsync  report, read stop" in listed[2]
        as_json = json.loads(subprocess.run(
            [sys.executable, "-m", "virtdriver", "--connect", "qemu:///system", "list", a.name(),
             "--json"], capture_output=True, text=True, check=True, timeout=120).stdout)
        row = as_json["volumeAttachments"][0]
        assert (row["error_policy"], row["rerror_policy"]) == ("report", "stop")
        for dom in (a, b):
            volume_driver.detach_volume(dom.name(), vid)


def test_a_swap_keeps_the_cache_and_error_policies(guests, volume_driver) -> None:
    dom = guests.start("io-swap")
    with LoopDevice(16 * MIB) as old_dev, LoopDevice(16 * MIB) as new_dev:
        old = local_volume(old_dev.device, multiattach=False)
        new = local_volume(new_dev.device, multiattach=False)
        volume_driver.attach_volume(old, dom.name(), cache="directsync", error_policy="ignore")
        after = volume_driver.swap_volume(dom.name(), old, new)
        assert (after.cache, after.error_policy, after.rerror_policy) == (
            "directsync", "ignore", None)
        alias = f"ua-{old['data']['volume_id']}"  # the device keeps its alias across a copy
        seen = block_info(dom, alias)
        assert seen.file == new_dev.device and seen.direct and not seen.writeback
        assert _driver_element(dom, alias)["error_policy"] == "ignore"
        volume_driver.detach_volume(dom.name(), new["data"]["volume_id"])


def test_a_bad_policy_is_refused_before_anything_happens(guests, volume_driver) -> None:
    from virtdriver.errors import InvalidRenderOption

    dom = guests.start("io-bad")
    with LoopDevice(16 * MIB) as loop:
        info = local_volume(loop.device, multiattach=True)
        with pytest.raises(InvalidRenderOption, match="cache: 'writeback'"):
            volume_driver.attach_volume(info, dom.name(), cache="writeback")
        assert volume_driver.list_attachments(dom.name()) == []
        assert volume_driver.records.connected() == []
