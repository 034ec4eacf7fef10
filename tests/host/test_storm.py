"""Attach storms in one process (#45, item 5): concurrent attaches share reads of the host, and
every decision still sees what was attached before its volume's lock was taken."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from testhosts.guests import LoopDevice
from tests.support.volumes import local_volume
from virtdriver.errors import VolumeInUse

pytestmark = pytest.mark.hypervisor

MIB = 1 << 20
COUNT = 12


def test_one_plain_volume_asked_for_by_many_at_once_goes_to_exactly_one(
        guests, volume_driver) -> None:
    """Reads of the host run all the time (as other volumes' attaches would make them): a
    caller that joined a read begun before the last attach of the volume would attach it
    again."""
    doms = [guests.start(f"st{i}") for i in range(COUNT)]
    stop = threading.Event()

    def read_all_the_time() -> None:
        while not stop.is_set():
            volume_driver.compute_host.shared_view()

    with LoopDevice(16 * MIB) as loop, ThreadPoolExecutor(COUNT + 1) as pool:
        info = local_volume(loop.device, multiattach=False)
        reader = pool.submit(read_all_the_time)
        try:
            futures = [pool.submit(volume_driver.attach_volume, info, d.name()) for d in doms]
            outcomes = [f.exception(120) or f.result() for f in futures]
        finally:
            stop.set()
        reader.result(60)
        won = [o for o in outcomes if not isinstance(o, BaseException)]
        refused = [o for o in outcomes if isinstance(o, VolumeInUse)]
        assert len(won) == 1 and len(refused) == COUNT - 1, outcomes
        holders = [d.name() for d in doms if volume_driver.list_attachments(d.name())]
        assert holders == [won[0].server_name]
        volume_driver.detach_volume(holders[0], info["data"]["volume_id"])
        assert volume_driver.records.connected() == []


def test_many_volumes_to_many_guests_at_once_each_lands_once(guests, volume_driver) -> None:
    doms = [guests.start(f"st{i}") for i in range(COUNT)]
    loops = [LoopDevice(8 * MIB) for _ in range(COUNT)]
    try:
        infos = [local_volume(loop.attach(), multiattach=False)
                 for loop in loops]
        with ThreadPoolExecutor(COUNT) as pool:
            made = list(pool.map(lambda p: volume_driver.attach_volume(p[0], p[1].name()),
                                 zip(infos, doms)))
        assert [m.server_name for m in made] == [d.name() for d in doms]
        for info, dom in zip(infos, doms):
            assert [a.volumeId for a in volume_driver.list_attachments(dom.name())] == [
                info["data"]["volume_id"]]
        assert sorted(volume_driver.records.connected()) == sorted(
            i["data"]["volume_id"] for i in infos)
    finally:
        for loop in loops:
            loop.detach()
