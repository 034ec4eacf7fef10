"""Attach storms in one process (#45, item 5): concurrent attaches share reads of the host, and
every decision still sees what was attached before its volume's lock was taken; attaches of one
multiattach volume that wait for its lock together are done as one."""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import libvirt
import pytest

from testhosts.guests import LoopDevice
from tests.support.volumes import file_volume, local_volume
from virtdriver import build_disk
from virtdriver.errors import InstanceNotFound, VolumeInUse
from virtdriver.hypervisor.domains import DomainsView
from virtdriver.hypervisor.locks import volume_lock
from virtdriver.hypervisor.sharedread import SharedRead

# whole_host: storms of parallel attaches, whose batching the host's other load would change
pytestmark = [pytest.mark.hypervisor, pytest.mark.whole_host]

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
            volume_driver.compute_host.shared_view(time.monotonic_ns())

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


def test_a_disk_another_client_attached_before_the_call_is_seen_though_a_read_runs(
        guests, volume_driver, tmp_path, mocker) -> None:
    """A read under way may serve an attach whose locks settled before it began, but never one
    asked for after it began: what virsh or nova attached just before the call is seen. Here a
    read of the host begins (the real read; it then takes a second more to come back, as on a
    big host), a file is attached to A through libvirt alone (no virtdriver lock knows of it),
    and then the file is asked for under a new volume id for B."""
    a, b = guests.start("seen-a"), guests.start("seen-b")
    host = volume_driver.compute_host
    real_view, began, release = host.view, threading.Event(), threading.Event()

    def read_then_linger() -> DomainsView:
        view = real_view()
        if not began.is_set():
            began.set()
            assert release.wait(30)
        return view

    mocker.patch.object(host, "_host_read", SharedRead(read_then_linger))
    image = tmp_path / "seen.raw"
    image.write_bytes(b"")
    os.truncate(image, MIB)
    xml = build_disk(file_volume(str(image), multiattach=False), target_dev="sda", bus="scsi",
                     scsi_unit=0).to_xml()
    with ThreadPoolExecutor(1) as pool:
        lingering = pool.submit(host.shared_view, time.monotonic_ns())
        assert began.wait(30)
        a.attachDeviceFlags(xml, libvirt.VIR_DOMAIN_AFFECT_LIVE)  # just before the call
        threading.Timer(1.0, release.set).start()  # the call has asked by then
        with pytest.raises(VolumeInUse):
            volume_driver.attach_volume(file_volume(str(image), multiattach=False), b.name())
        lingering.result(60)
    assert volume_driver.list_attachments(b.name()) == []


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


def attach_waiting_together(volume_driver, info: dict, names: list[str]) -> list:
    """Each name's attach_volume from a thread of its own, all asked while the volume's lock is
    held here, so that they wait for it together; their outcomes, in order."""
    host = volume_driver.compute_host
    vid = info["data"]["volume_id"]
    with ThreadPoolExecutor(len(names)) as pool:
        with volume_lock(host.options.lock_dir, vid):
            futures = [pool.submit(volume_driver.attach_volume, info, n) for n in names]
            every = threading.Event()
            while not any(len(b.items) == len(names) for b in list(host.attach_batches._open
                                                                     .values())):
                assert not any(f.done() for f in futures), [f.exception() for f in futures]
                every.wait(0.01)
        return [f.exception(120) or f.result() for f in futures]


def test_one_multiattach_volume_asked_for_by_many_at_once_is_attached_together(
        guests, volume_driver, caplog) -> None:
    """Attaches of one multiattach volume that wait for its lock together are done as one;
    when one of them cannot be done (its guest is not there), each is done alone: that one
    fails with its own error, every other guest gets the disk once."""
    doms = [guests.start(f"st{i}") for i in range(COUNT)]
    names = [d.name() for d in doms]
    caplog.set_level(logging.DEBUG, logger="virtdriver.driver.attach_batch")
    with LoopDevice(16 * MIB) as loop:
        info = local_volume(loop.device, multiattach=True)
        vid = info["data"]["volume_id"]
        missing = names[0] + "-not-here"
        outcomes = attach_waiting_together(volume_driver, info, [*names[:4], missing,
                                                                 *names[4:]])
        assert isinstance(outcomes[4], InstanceNotFound), outcomes
        made = outcomes[:4] + outcomes[5:]
        assert [m.server_name for m in made] == names
        said = [r.getMessage() for r in caplog.records]
        assert f"volume {vid}: {COUNT + 1} attaches waited together; attaching them as one" \
            in said
        assert any(m.startswith(f"volume {vid}: attaching {COUNT + 1} together failed")
                   for m in said), said
        for name in names:
            disks = volume_driver.list_attachments(name)
            assert [(a.volumeId, a.shareable) for a in disks] == [(vid, True)], disks
        assert volume_driver.records.connected() == [vid]
        for name in names:
            volume_driver.detach_volume(name, vid)
        assert volume_driver.records.connected() == []

        caplog.clear()
        outcomes = attach_waiting_together(volume_driver, info, names)
        assert [o.server_name for o in outcomes] == names
        said = [r.getMessage() for r in caplog.records]
        assert f"volume {vid}: {COUNT} attaches waited together; attaching them as one" in said
        assert not any("together failed" in m for m in said), said
        assert all(len(volume_driver.list_attachments(n)) == 1 for n in names)
        for name in names:
            volume_driver.detach_volume(name, vid)
