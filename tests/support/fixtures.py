"""pytest fixtures over real parts: a real libvirtd, real OS-less guests, real loop devices.

Imported by tests/conftest.py (so every test can ask for them); tests/host/embed/conftest.py
adds the same for the embedded driver.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from testhosts.guests import (
    SYSTEM_URI,
    DeviceEvents,
    Guests,
    LoopDevice,
    open_connection,
    sparse_file,
    system_daemon,
)


def require_libvirtd() -> None:
    """Skip without a daemon for qemu:///system (libvirtd, or the split daemons' virtqemud);
    under CI, which has one, fail instead."""
    if system_daemon() is not None:
        return
    reason = ("no libvirt daemon on this host (neither libvirt-sock nor virtqemud-sock in "
              "/run/libvirt; run scripts/setup-host.sh)")
    if os.environ.get("CI"):
        pytest.fail(reason)  # CI has the hypervisor: a missing daemon is a failure, not a skip
    pytest.skip(reason)


def opened(uri: str) -> Iterator[libvirt.virConnect]:
    """The body of a connection fixture: open ``uri`` with the event loop running, close after."""
    conn = open_connection(uri)
    yield conn
    conn.close()


def made_guests(conn: libvirt.virConnect) -> Iterator[Guests]:
    """The body of a guests fixture: every guest started through it is removed after the test.

    On the nested test host (``VIRTDRIVER_NESTED``) the guests run under TCG: that host's KVM
    runs on the SVM that QEMU's TCG emulates for it, and there an OS-less guest restarted with
    a volume as its boot disk was once reset by itself half a second after it started
    (testhosts/README.md)."""
    with Guests(conn, kvm=False if os.environ.get("VIRTDRIVER_NESTED") else None) as made:
        yield made


@pytest.fixture(scope="session")
def system_conn() -> Iterator[libvirt.virConnect]:
    """A connection to the real libvirtd (qemu:///system), opened with the event loop running."""
    require_libvirtd()
    yield from opened(SYSTEM_URI)


@pytest.fixture
def guests(system_conn: libvirt.virConnect) -> Iterator[Guests]:
    """Starts OS-less guests on qemu:///system and removes them after the test."""
    yield from made_guests(system_conn)


@pytest.fixture
def events(system_conn: libvirt.virConnect) -> Iterator[DeviceEvents]:
    """DEVICE_REMOVED events of qemu:///system, from now on."""
    with DeviceEvents(system_conn) as seen:
        yield seen


@pytest.fixture
def volume_driver(tmp_path: Path) -> Iterator[Any]:
    """A LibvirtVolumeDriver on qemu:///system with its own state directory."""
    require_libvirtd()
    from virtdriver import LibvirtVolumeDriver

    driver = LibvirtVolumeDriver(SYSTEM_URI, state_dir=tmp_path / "state", detach_timeout=20)
    yield driver
    driver.close()


@pytest.fixture
def loop_device() -> Iterator[LoopDevice]:
    """A 64 MiB loop device over a sparse file, detached afterwards."""
    with LoopDevice(64 * 1024 * 1024) as loop:
        yield loop


@pytest.fixture
def second_loop() -> Iterator[LoopDevice]:
    """Another 64 MiB loop device (the loop_device fixture's size), detached afterwards."""
    with LoopDevice(64 * 1024 * 1024) as loop:
        yield loop


@pytest.fixture
def raw_file(tmp_path: Path) -> Path:
    """A 16 MiB sparse raw image."""
    return sparse_file(tmp_path / "vol.raw")
