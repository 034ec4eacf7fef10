"""Faults, provoked for real, and the state the driver leaves behind each time.

After every fault: no half attachment (the volume is in a guest's live XML exactly when it is in
its definition, or in neither), a host-connection record exactly when some guest still has the
volume, no lock held, and a typed :class:`~virtdriver.errors.VirtDriverError` whose message says
what failed.

(a) os-brick's connect fails (kernel iSCSI with no initiator here);
(b) libvirt/QEMU refuse the live attach (target in use, missing file or device, a virtio disk
    on a guest without ACPI), with and without another guest holding the volume;
(c) the definition cannot be saved after the live attach succeeded (the daemon's config dir
    remounted read-only, in a libvirtd of the tests' own);
(d) the guest does not confirm the detach in time (an ACPI guest's virtio disk, which this
    OS-less guest releases only when the test writes the eject register as a guest OS would);
    and a 1 ms timeout is no spurious failure when the device is already gone;
(e) the guest is destroyed in the middle of an attach or a detach (from another thread);
(f) libvirtd is killed and restarted between attach and detach (the tests' own libvirtd).

What the driver guarantees when a guest disappears under it (e): an attach fails with a typed
error and leaves nothing (no disk, no host connection unless another guest uses the volume);
a detach completes — the live device went with the guest, a persistent guest's definition is
cleaned, and the host connection is released when no other guest uses the volume. A guest
destroyed behind the driver's back (outside any call) leaves its host connection recorded:
``audit`` reports it as a ``leak`` and the volume's next detach on this host releases it.
(The destroys are timed by letting a driver method run for real and destroying the guest from
another thread right after it; the failures that follow are libvirt's own.)
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from testhosts.guests import Guests, open_connection, read_pattern, sparse_file, write_pattern
from tests.support import ROOT
from tests.support.invariants import InvariantChecker, volume_disks
from tests.support.volumes import file_volume, local_volume
from virtdriver.errors import (
    AttachFailed,
    DetachTimeout,
    HostConnectFailed,
    HypervisorError,
    NotAttached,
    VirtDriverError,
)
from virtdriver.hypervisor.locks import lock_is_free

pytestmark = pytest.mark.hypervisor


# ---- helpers ------------------------------------------------------------------------------------

def assert_clean(conn: libvirt.virConnect, driver: Any, volume_id: str) -> None:
    """The volume is nowhere: no disk in any guest, no host record, no lock held."""
    assert volume_disks(conn, volume_id) == [], volume_disks(conn, volume_id)
    assert volume_id not in driver.records.connected()
    assert_no_lock_held(driver)


def assert_no_lock_held(driver: Any) -> None:
    for path in driver.lock_dir.glob("volume-*.lock"):
        name = path.name[len("volume-"):-len(".lock")]
        assert lock_is_free(driver.lock_dir, name), f"{path.name} is still held"


def check_consistent(conn: libvirt.virConnect, driver: Any, volumes: dict[str, bool]) -> int:
    checker = InvariantChecker(conn, driver.state_dir, volumes)
    checker.check()
    return checker.passed


def raw_file(directory: Path, name: str = "vol.raw", size: int = 16 << 20) -> Path:
    return sparse_file(directory / name, size)


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def in_live_xml(dom: libvirt.virDomain, volume_id: str) -> bool:
    return f"ua-{volume_id}" in dom.XMLDesc(0)


def in_definition(dom: libvirt.virDomain, volume_id: str) -> bool:
    return f"ua-{volume_id}" in dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)


def destroy_from_another_thread(dom: libvirt.virDomain) -> None:
    """Destroy ``dom`` from another thread, and wait until it is done."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            dom.destroy()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            failure.append(exc)

    thread = threading.Thread(target=run, name="destroyer")
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "destroy did not return"
    if failure:
        raise failure[0]


def start_acpi_guest(guests: Guests, name: str) -> libvirt.virDomain:
    """A persistent guest with ACPI: virtio disks hot-plug, but their unplug waits for a guest
    OS that this guest does not have."""
    return guests.start(name, acpi=True)


# ---- (a) the host connect fails -----------------------------------------------------------------

ISCSI_STATE = [Path("/etc/iscsi/nodes"), Path("/var/lib/iscsi")]


def iscsi_node_records() -> set[str]:
    found: set[str] = set()
    for top in ISCSI_STATE:
        if top.is_dir():
            found |= {str(p) for p in top.rglob("*")}
    return found


def kernel_iscsi_volume(multiattach: bool = True) -> dict[str, Any]:
    info = local_volume("/dev/null", multiattach=multiattach)
    info["driver_volume_type"] = "iscsi"
    info["data"] = {"volume_id": info["data"]["volume_id"], "target_portal": "127.0.0.1:3260",
                    "target_iqn": "iqn.2010-10.org.openstack:volume-nowhere", "target_lun": 1,
                    "auth_method": "CHAP", "auth_username": "u", "auth_password": "pw-SECRET-1"}
    return info


def test_a_host_connect_failure_is_prompt_typed_and_leaves_nothing(
        guests, volume_driver, system_conn) -> None:
    a = guests.start("a")
    info = kernel_iscsi_volume()
    vid = info["data"]["volume_id"]
    nodes_before = iscsi_node_records()
    started = time.monotonic()
    with pytest.raises(HostConnectFailed) as caught:
        volume_driver.attach_volume(info, a.name())
    elapsed = time.monotonic() - started
    assert elapsed < 30, f"the failed iSCSI connect took {elapsed:.1f} s"
    message = str(caught.value)
    assert "os-brick could not connect the ISCSI volume" in message
    assert "pw-SECRET-1" not in message
    assert_clean(system_conn, volume_driver, vid)
    assert volume_driver.list_attachments(a.name()) == []
    # iscsiadm (where it exists) must not be left with node records for the target.
    assert iscsi_node_records() == nodes_before
    if shutil.which("iscsiadm") is None:
        assert not any(p.exists() for p in ISCSI_STATE) or nodes_before == set()


def test_a_host_connect_failure_through_the_cli_is_one_line(guests, tmp_path) -> None:
    import json

    a = guests.start("a")
    info = tmp_path / "iscsi.json"
    info.write_text(json.dumps(kernel_iscsi_volume()))
    done = subprocess.run([sys.executable, "-m", "virtdriver", "--state-dir",
                           str(tmp_path / "state"), "attach", a.name(), str(info)],
                          capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("virtdriver: error: ") and "ISCSI" in lines[0]
    assert "pw-SECRET-1" not in done.stderr


# ---- (b) the live attach fails ------------------------------------------------------------------

@pytest.mark.parametrize("case", ["target-in-use", "missing-file", "missing-device",
                                  "virtio-without-acpi"])
def test_b_a_refused_live_attach_is_undone(case: str, guests, volume_driver, system_conn,
                                           loop_device, tmp_path) -> None:
    a = guests.start("a")
    other = file_volume(str(raw_file(tmp_path, "other.raw")), multiattach=False)
    volume_driver.attach_volume(other, a.name())  # sda: something else the guest keeps
    kwargs: dict[str, Any] = {}
    if case == "target-in-use":
        info = local_volume(loop_device.device, multiattach=True)
        kwargs["target_dev"] = "sda"
    elif case == "missing-file":
        info = file_volume(str(tmp_path / "no-such-file.raw"), multiattach=False)
    elif case == "missing-device":
        info = local_volume("/dev/vdtest-no-such-device", multiattach=False)
    else:
        info = local_volume(loop_device.device, multiattach=True)
        kwargs["bus"] = "virtio"
    vid = info["data"]["volume_id"]
    before = (a.XMLDesc(0), a.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
    with pytest.raises(AttachFailed) as caught:
        volume_driver.attach_volume(info, a.name(), **kwargs)
    message = str(caught.value)
    if case == "target-in-use":
        assert f"device sda is already in use in {a.name()}" in message
    else:
        assert vid in message and a.name() in message
        assert caught.value.libvirt_message, "libvirt's own words are kept"
    if case == "virtio-without-acpi":
        assert "hotplug" in message
    assert (a.XMLDesc(0), a.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)) == before
    assert_clean(system_conn, volume_driver, vid)
    assert [x.volumeId for x in volume_driver.list_attachments(a.name())] == [
        other["data"]["volume_id"]]
    check_consistent(system_conn, volume_driver, {vid: True, other["data"]["volume_id"]: False})


def test_b_a_refused_attach_keeps_the_other_guests_attachment(
        guests, volume_driver, system_conn, loop_device) -> None:
    a, b = guests.start("a"), guests.start("b")
    info = local_volume(loop_device.device, multiattach=True)
    vid, alias = info["data"]["volume_id"], f"ua-{info['data']['volume_id']}"
    volume_driver.attach_volume(info, a.name())
    write_pattern(a, alias, 0x42)
    with pytest.raises(AttachFailed):
        volume_driver.attach_volume(info, b.name(), bus="virtio")
    assert not in_live_xml(b, vid) and not in_definition(b, vid)
    assert volume_driver.records.connected() == [vid]  # A still uses it: not disconnected
    assert read_pattern(a, alias, 0x42)
    write_pattern(a, alias, 0x43)
    check_consistent(system_conn, volume_driver, {vid: True})
    volume_driver.detach_volume(a.name(), vid)
    assert_clean(system_conn, volume_driver, vid)


# ---- (c) the definition cannot be saved after the live attach ---------------------------------

@pytest.fixture(scope="module")
def private_libvirtd() -> Iterator[Any]:
    from testhosts.guests import private_libvirtd as pl

    reason = pl.available()
    if reason is not None:
        pytest.skip(f"no private libvirtd: {reason}")
    with pl.PrivateLibvirtd() as daemon:
        yield daemon


@pytest.fixture
def private_conn(private_libvirtd) -> Iterator[libvirt.virConnect]:
    conn = open_connection(private_libvirtd.uri)
    yield conn
    try:
        conn.close()
    except libvirt.libvirtError:
        pass


@pytest.fixture
def private_guests(private_libvirtd) -> Iterator[Guests]:
    conn = open_connection(private_libvirtd.uri)
    made = Guests(conn)
    try:
        yield made
    finally:
        # The daemon may have been restarted meanwhile: a fresh connection removes them.
        fresh = open_connection(private_libvirtd.uri)
        made.conn = fresh
        made.close()
        fresh.close()


@pytest.fixture
def private_driver(private_libvirtd, tmp_path) -> Iterator[Any]:
    from virtdriver import LibvirtVolumeDriver

    driver = LibvirtVolumeDriver(private_libvirtd.uri, state_dir=tmp_path / "pstate",
                                 detach_timeout=20)
    yield driver
    driver.close()


def test_c_a_definition_that_cannot_be_saved_undoes_the_live_attach(
        private_libvirtd, private_conn, private_guests, private_driver, loop_device) -> None:
    a = private_guests.start("c")
    info = local_volume(loop_device.device, multiattach=True)
    vid = info["data"]["volume_id"]
    config_dir = "/etc/libvirt/qemu"  # as the private daemon sees it
    private_libvirtd.in_namespace("mount", "--bind", config_dir, config_dir)
    try:
        private_libvirtd.in_namespace("mount", "-o", "remount,bind,ro", config_dir)
        with pytest.raises(AttachFailed) as caught:
            private_driver.attach_volume(info, a.name())
    finally:
        private_libvirtd.in_namespace("umount", config_dir)
    # libvirt attached the disk to the running guest and then failed to write the definition.
    assert "Read-only file system" in (caught.value.libvirt_message or ""), caught.value
    assert not in_live_xml(a, vid), "the live half of the attach was left behind"
    assert not in_definition(a, vid)
    assert_clean(private_conn, private_driver, vid)
    # With a writable definition again, the same attach works.
    private_driver.attach_volume(info, a.name())
    assert in_live_xml(a, vid) and in_definition(a, vid)
    private_driver.detach_volume(a.name(), vid)
    assert_clean(private_conn, private_driver, vid)


# ---- (d) the guest does not confirm the detach --------------------------------------------------

def test_d_a_tiny_timeout_is_no_spurious_failure(guests, volume_driver, system_conn,
                                                 loop_device) -> None:
    """libvirt itself waits (up to 5 s) for QEMU to finish a SCSI unplug before it returns, so
    a 1 ms wait for the event finds the device gone: the driver checks the live XML instead of
    trusting the timeout, and the detach completes."""
    a = guests.start("a")
    info = local_volume(loop_device.device, multiattach=True)
    vid = info["data"]["volume_id"]
    for mode in ("rw", "ro"):
        volume_driver.attach_volume(info, a.name(), attach_mode=mode)
        volume_driver.detach_volume(a.name(), vid, timeout=0.001)
        assert_clean(system_conn, volume_driver, vid)


def eject_like_a_guest_os(dom: libvirt.virDomain, volume_id: str) -> None:
    """What the guest OS does to confirm an ACPI PCI unplug: write the slot's bit to the PIIX4
    hot-plug eject register (I/O port 0xae08), through the monitor's ``o`` command."""
    import re

    import libvirt_qemu

    live = dom.XMLDesc(0)
    disk = live[live.index(f"ua-{volume_id}"):]
    slot = int(re.search(r"slot='(0x[0-9a-f]+)'", disk).group(1), 16)  # type: ignore[union-attr]
    libvirt_qemu.qemuMonitorCommand(dom, f"o 0xae08 {1 << slot:#x}",
                                    libvirt_qemu.VIR_DOMAIN_QEMU_MONITOR_COMMAND_HMP)


def test_d_a_guest_stopped_while_the_detach_waits_ends_the_wait(
        guests, volume_driver, system_conn, tmp_path) -> None:
    """The removal event never comes from a guest that is destroyed meanwhile; its lifecycle
    event ends the wait (the device went with the guest) instead of the full timeout."""
    import threading

    a = start_acpi_guest(guests, "acpi")
    info = file_volume(str(raw_file(tmp_path)), multiattach=False)
    vid = info["data"]["volume_id"]
    volume_driver.attach_volume(info, a.name(), bus="virtio")
    stopper = threading.Timer(1.0, a.destroy)
    stopper.start()
    started = time.monotonic()
    volume_driver.detach_volume(a.name(), vid, timeout=60)
    waited = time.monotonic() - started
    stopper.join()
    assert waited < 30, f"the detach waited {waited:.0f} s for a guest that was gone"
    assert not in_definition(a, vid)
    assert volume_driver.records.connected() == []


def test_d_a_guest_that_does_not_release_keeps_the_attachment_until_it_does(
        guests, volume_driver, system_conn, tmp_path) -> None:
    """An ACPI guest's virtio disk is unplugged only when the guest OS confirms it, which this
    OS-less guest never does by itself: the detach times out, for real."""
    a = start_acpi_guest(guests, "acpi")
    info = file_volume(str(raw_file(tmp_path)), multiattach=False)
    vid = info["data"]["volume_id"]
    volume_driver.attach_volume(info, a.name(), bus="virtio")
    for attempt in range(1):
        started = time.monotonic()
        with pytest.raises(DetachTimeout) as caught:
            volume_driver.detach_volume(a.name(), vid, timeout=0.5)
        assert time.monotonic() - started < 10
        assert f"did not release volume {vid} within 0.5 s" in str(caught.value)
        # In place: live and in the definition, the host connection kept, no lock held.
        assert in_live_xml(a, vid) and in_definition(a, vid), f"attempt {attempt}"
        assert volume_driver.records.connected() == [vid]
        assert_no_lock_held(volume_driver)
        check_consistent(system_conn, volume_driver, {vid: False})
    # The guest confirms late (as a slow guest OS would); the next detach then succeeds.
    eject_like_a_guest_os(a, vid)
    wait_until(lambda: not in_live_xml(a, vid), 10, "the guest to release the disk")
    volume_driver.detach_volume(a.name(), vid)
    assert_clean(system_conn, volume_driver, vid)
    assert a.isActive()


# ---- (e) the guest is destroyed mid-operation ---------------------------------------------------

def destroy_when(mocker, target: Any, method: str, dom: libvirt.virDomain,
                 after: bool = True) -> list[int]:
    """Let ``target.method`` run for real, and destroy ``dom`` (from another thread) right
    after (or before) its first call. Returns a list that counts the destroys."""
    real = getattr(target, method)
    fired: list[int] = []

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not after and not fired:
            fired.append(1)
            destroy_from_another_thread(dom)
        result = real(*args, **kwargs)
        if after and not fired:
            fired.append(1)
            destroy_from_another_thread(dom)
        return result

    mocker.patch.object(target, method, side_effect=wrapper, autospec=False)
    return fired


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "transient"])
def test_e_guest_destroyed_between_host_connect_and_attach(
        persistent: bool, guests, volume_driver, system_conn, loop_device, mocker) -> None:
    a = guests.start("a", persistent=persistent)
    info = local_volume(loop_device.device, multiattach=True)
    vid = info["data"]["volume_id"]
    fired = destroy_when(mocker, volume_driver.records, "connect", a)
    with pytest.raises(AttachFailed) as caught:
        volume_driver.attach_volume(info, a.name())
    assert fired == [1]
    assert vid in str(caught.value)
    assert_clean(system_conn, volume_driver, vid)


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "transient"])
@pytest.mark.parametrize("when", ["before-detach-request", "while-waiting"])
def test_e_guest_destroyed_during_detach(persistent: bool, when: str, guests, volume_driver,
                                         system_conn, loop_device, mocker) -> None:
    a, b = guests.start("a", persistent=persistent), guests.start("b")
    info = local_volume(loop_device.device, multiattach=True)
    vid = info["data"]["volume_id"]
    volume_driver.attach_volume(info, a.name())
    volume_driver.attach_volume(info, b.name(), attach_mode="ro")
    events = volume_driver.connection.events
    if when == "before-detach-request":
        fired = destroy_when(mocker, events, "expect", a)
    else:
        fired = destroy_when(mocker, events, "wait", a, after=False)
    started = time.monotonic()
    # The device went with the guest: the detach completes (the definition, if any, cleaned).
    volume_driver.detach_volume(a.name(), vid, timeout=5)
    assert fired == [1]
    assert time.monotonic() - started < 10
    assert_no_lock_held(volume_driver)
    if persistent:
        assert not in_definition(a, vid)
    # B still has the volume: the host connection stays, and B's data path works.
    assert volume_driver.records.connected() == [vid]
    assert read_pattern(b, f"ua-{vid}", 0x00)
    assert {d.domain for d in volume_disks(system_conn, vid)} == {b.name()}
    check_consistent(system_conn, volume_driver, {vid: True})
    volume_driver.detach_volume(b.name(), vid)
    assert_clean(system_conn, volume_driver, vid)


@pytest.mark.parametrize("when", ["before-detach-request", "while-waiting"])
def test_e_last_user_destroyed_mid_detach_releases_the_host_connection(
        when: str, guests, volume_driver, system_conn, loop_device, mocker) -> None:
    a = guests.start("a", persistent=False)
    info = local_volume(loop_device.device, multiattach=False)
    vid = info["data"]["volume_id"]
    volume_driver.attach_volume(info, a.name())
    events = volume_driver.connection.events
    if when == "before-detach-request":
        destroy_when(mocker, events, "expect", a)
    else:
        destroy_when(mocker, events, "wait", a, after=False)
    volume_driver.detach_volume(a.name(), vid, timeout=2)
    assert_clean(system_conn, volume_driver, vid)


def test_e_transient_guest_destroyed_outside_any_operation_is_a_reported_leak(
        guests, volume_driver, system_conn, loop_device) -> None:
    """Nothing tells the driver when a guest is destroyed behind its back: the record stays
    until the volume is next used; audit names it meanwhile."""
    from virtdriver.ops.audit import audit_host

    a = guests.start("a", persistent=False)
    info = local_volume(loop_device.device, multiattach=False)
    vid = info["data"]["volume_id"]
    volume_driver.attach_volume(info, a.name())
    a.destroy()
    volume = audit_host(system_conn, volume_driver.state_dir).volume(vid)
    assert volume is not None and [d.kind for d in volume.dangers] == ["leak"]
    with pytest.raises(HypervisorError):  # InstanceNotFound: the guest is gone
        volume_driver.detach_volume(a.name(), vid)
    b = guests.start("b")
    volume_driver.attach_volume(info, b.name())
    volume_driver.detach_volume(b.name(), vid)
    assert_clean(system_conn, volume_driver, vid)
    assert audit_host(system_conn, volume_driver.state_dir).volume(vid) is None


def test_e_guest_destroyed_at_random_moments(guests, volume_driver, system_conn, loop_device,
                                             tmp_path) -> None:
    """Less precise than the tests above, but nothing chosen: a thread destroys the guest after
    a random delay while the test attaches and detaches two volumes in a loop."""
    rng = random.Random(20261122)
    shared = local_volume(loop_device.device, multiattach=True)
    single = file_volume(str(raw_file(tmp_path)), multiattach=False)
    vids = {shared["data"]["volume_id"]: True, single["data"]["volume_id"]: False}
    errors: list[str] = []
    for round_ in range(3):
        dom = guests.start(f"r{round_}", persistent=round_ != 1)
        delay = rng.uniform(0.0, 0.4)
        killer = threading.Timer(delay, lambda d=dom: _quiet_destroy(d))
        killer.start()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and _running(dom):
            for info in (shared, single):
                try:
                    volume_driver.attach_volume(info, dom.name(), attach_mode=rng.choice(
                        ("ro", "rw")))
                    volume_driver.detach_volume(dom.name(), info["data"]["volume_id"],
                                                timeout=5)
                except VirtDriverError as exc:
                    errors.append(type(exc).__name__)
        killer.join()
        # Make it consistent: what a shut-off definition still holds is detached again.
        for vid in vids:
            for d in volume_disks(system_conn, vid):
                try:
                    volume_driver.detach_volume(d.domain, vid)
                except NotAttached:
                    pass
        for vid in vids:
            if vid in volume_driver.records.connected() and not volume_disks(system_conn, vid):
                # a transient guest vanished with the volume: the next use releases it
                other = guests.start("cleanup")
                info = shared if vids[vid] else single
                volume_driver.attach_volume(info, other.name())
                volume_driver.detach_volume(other.name(), vid)
        check_consistent(system_conn, volume_driver, vids)
        for vid in vids:
            assert_clean(system_conn, volume_driver, vid)
    print(f"errors seen while guests were destroyed: {sorted(set(errors))}")


def _quiet_destroy(dom: libvirt.virDomain) -> None:
    try:
        dom.destroy()
    except libvirt.libvirtError:
        pass


def _running(dom: libvirt.virDomain) -> bool:
    try:
        return bool(dom.isActive())
    except libvirt.libvirtError:
        return False


# ---- (f) libvirtd restarted between attach and detach -------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["crash", "stop"])
def test_f_libvirtd_restart_between_attach_and_detach(
        sig: int, private_libvirtd, private_guests, private_driver, loop_device,
        tmp_path) -> None:
    a, b = private_guests.start("fa"), private_guests.start("fb")
    shared = local_volume(loop_device.device, multiattach=True)
    single = file_volume(str(raw_file(tmp_path)), multiattach=False)
    mid, sid = shared["data"]["volume_id"], single["data"]["volume_id"]
    private_driver.attach_volume(shared, a.name())
    private_driver.attach_volume(shared, b.name(), attach_mode="ro")
    private_driver.attach_volume(single, a.name())
    write_pattern(a, f"ua-{mid}", 0x6B)
    qemu_pids = {d.name(): _qemu_pid(private_libvirtd, d.name()) for d in (a, b)}

    private_libvirtd.restart(sig)

    # The guests survived: same QEMU processes, still running, still sharing the data.
    conn = open_connection(private_libvirtd.uri)
    try:
        for name, pid in qemu_pids.items():
            assert _qemu_pid(private_libvirtd, name) == pid
            assert conn.lookupByName(name).isActive()
        fa, fb = conn.lookupByName(a.name()), conn.lookupByName(b.name())
        assert read_pattern(fb, f"ua-{mid}", 0x6B)
        volumes = {mid: True, sid: False}
        check_consistent(conn, private_driver, volumes)
        # The same driver object (its connection died with the daemon) detaches correctly,
        # and the accounting, read from libvirt, is still right.
        private_driver.detach_volume(a.name(), mid)
        assert private_driver.records.connected() == sorted([mid, sid])
        assert read_pattern(fb, f"ua-{mid}", 0x6B)
        private_driver.detach_volume(a.name(), sid)
        assert private_driver.records.connected() == [mid]
        private_driver.detach_volume(b.name(), mid)
        for vid in volumes:
            assert_clean(conn, private_driver, vid)
        assert not in_live_xml(fa, mid) and not in_definition(fb, mid)
        check_consistent(conn, private_driver, volumes)
    finally:
        conn.close()


def _qemu_pid(daemon: Any, name: str) -> int:
    pid = int((daemon.base / "run" / "qemu" / f"{name}.pid").read_text().strip())
    os.kill(pid, 0)  # alive
    return pid


def test_no_secret_reaches_the_logs_even_at_debug(guests, volume_driver, caplog) -> None:
    """os-brick's own logging (routed through virtdriver.backend) and ours, at DEBUG, during a
    CHAP attach that fails for real: the password appears in no record."""
    import logging

    from virtdriver.errors import VirtDriverError

    a = guests.start("a")
    info = kernel_iscsi_volume()
    caplog.set_level(logging.DEBUG)
    with pytest.raises(VirtDriverError):
        volume_driver.attach_volume(info, a.name())
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert any(r.name.startswith("virtdriver.backend") for r in caplog.records), "no os-brick log"
    assert "pw-SECRET-1" not in text


def test_text_from_outside_is_masked() -> None:
    from virtdriver.secrets import mask

    for leaked in ("iscsiadm -m node -o update -n node.session.auth.password -v pw-SECRET-1",
                   '{"auth_password": "pw-SECRET-1"}', "password=pw-SECRET-1 user=u",
                   "'secret': 'pw-SECRET-1'", "<auth_password>pw-SECRET-1</auth_password>"):
        assert "pw-SECRET-1" not in mask(leaked), leaked
