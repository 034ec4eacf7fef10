"""Shared fixtures: libvirt's RelaxNG schema, the fixture folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from virtdriver.schema import disk_schema, validate_disk

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


@pytest.fixture(scope="session")
def schema_valid():
    """A checker that asserts a disk XML validates against libvirt's own schema."""
    disk_schema()  # compile once for the session; fails loudly if the schemas are missing
    return validate_disk


# ---- hypervisor fixtures: a real libvirtd and real OS-less guests -------------------------------

import os  # noqa: E402
import uuid  # noqa: E402

LIBVIRT_SOCKET = Path("/var/run/libvirt/libvirt-sock")


def _require_libvirtd() -> None:
    if LIBVIRT_SOCKET.exists():
        return
    reason = f"no libvirtd on this host ({LIBVIRT_SOCKET} missing; run scripts/setup-host.sh)"
    if os.environ.get("CI"):
        pytest.fail(reason)  # CI has the hypervisor: a missing daemon is a failure, not a skip
    pytest.skip(reason)


@pytest.fixture(scope="session")
def system_conn():
    """A connection to the real libvirtd (qemu:///system)."""
    _require_libvirtd()
    from tests.guests import open_connection

    conn = open_connection("qemu:///system")
    yield conn
    conn.close()


@pytest.fixture
def guests(system_conn):
    """Starts OS-less guests on qemu:///system and removes them after the test."""
    from tests.guests import Guests

    with Guests(system_conn) as made:
        yield made


@pytest.fixture
def volume_driver(tmp_path):
    """A LibvirtVolumeDriver on qemu:///system with its own state directory."""
    _require_libvirtd()
    from virtdriver import LibvirtVolumeDriver

    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state",
                                 detach_timeout=20)
    yield driver
    driver.close()


@pytest.fixture
def loop_device():
    """A 64 MiB loop device over a sparse file, detached afterwards."""
    from tests.guests import LoopDevice

    with LoopDevice(64 * 1024 * 1024) as loop:
        yield loop


def local_volume(device_path: str, *, multiattach: bool, volume_id: str | None = None) -> dict:
    """connection_info of a host block device for os-brick's LOCAL connector."""
    vid = volume_id or str(uuid.uuid4())
    return {"driver_volume_type": "local", "serial": vid, "multiattach": multiattach,
            "data": {"volume_id": vid, "device_path": device_path, "access_mode": "rw"}}


def file_volume(path: str, *, multiattach: bool, volume_id: str | None = None) -> dict:
    """connection_info of a raw file (os-brick's GPFS connector, a file-backed local disk)."""
    vid = volume_id or str(uuid.uuid4())
    return {"driver_volume_type": "gpfs", "serial": vid, "multiattach": multiattach,
            "data": {"volume_id": vid, "device_path": path}}


# The embedded QEMU driver takes over every qemu:/// URI of the process that loaded it (a later
# qemu:///system open fails with "Missing URI parameter 'root'"), so its tests run in a child
# pytest of their own (tests/test_embed.py starts it).
EMBED_CHILD = os.environ.get("VIRTDRIVER_EMBED_CHILD") == "1"
collect_ignore = [] if EMBED_CHILD else ["embed"]
