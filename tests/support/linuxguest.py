"""Fixtures and in-guest probes over the small Linux test guest (testhosts/linuxguest).

The guests boot under TCG (about 20 s for the pair here), so one pair serves all of
tests/inguest/ (a package-scoped fixture); each test detaches what it attached. Every probe
polls inside the guest with a bounded loop and returns what the guest printed: that output is
the evidence the tests assert on.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from testhosts.guests.private_libvirtd import BINDS
from testhosts.linuxguest import LinuxGuest, LinuxGuests, build
from testhosts.linuxguest.guest import channel_path
from tests.support.fixtures import require_libvirtd

#: How long a probe polls inside the guest (seconds); a bound, not an expected duration.
POLL_SECONDS = 30


@pytest.fixture(scope="session")
def linux_image():
    """The test guest's kernel and initramfs, built from Debian packages on first use."""
    require_libvirtd()
    return build()


@pytest.fixture(scope="package")
def linux_pair(linux_image) -> Iterator[tuple[LinuxGuest, LinuxGuest]]:
    """Two booted Linux guests (A and B), booted in parallel, removed after the package's tests."""
    from testhosts.guests import open_connection

    conn: libvirt.virConnect = open_connection()
    with LinuxGuests(conn, linux_image) as made:
        a, b = made.start("a", wait=False), made.start("b", wait=False)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda g: g.wait_ready(made.boot_timeout), (a, b)))
        yield a, b
    conn.close()


def _poll(body: str, tries: int) -> str:
    """A shell loop running ``body`` until it succeeds, at most ``tries`` times 0.2 s apart."""
    return (f"n=0; until {body}; do n=$((n+1)); [ $n -ge {tries} ] && exit 1; sleep 0.2; done")


def disk_by_serial(guest: LinuxGuest, serial: str, *, timeout: float = POLL_SECONDS) -> str:
    """The guest's name (``sdX``) of the SCSI disk whose unit serial is ``serial``.

    Polls ``/sys/block``; asks the HBA to rescan after the first seconds in case the hot-plug
    event was missed.
    """
    tries = int(timeout / 0.2)
    find = (f"d=$(grep -l '{serial}' /sys/block/sd*/device/vpd_pg80 2>/dev/null | head -n1)"
            f" && [ -n \"$d\" ] || {{ [ $n = 10 ] && echo '- - -' > "
            "/sys/class/scsi_host/host0/scan; false; }")
    out = guest.check(_poll(find, tries) + "; echo ${d#/sys/block/} | cut -d/ -f1",
                      timeout=timeout + 30)
    return out.strip()


def wait_disk_gone(guest: LinuxGuest, name: str, *, timeout: float = POLL_SECONDS) -> str:
    """Wait until ``/sys/block/<name>`` is gone; returns the guest's ``ls /sys/block``."""
    guest.check(_poll(f"[ ! -e /sys/block/{name} ]", int(timeout / 0.2)), timeout=timeout + 30)
    return guest.check("ls /sys/block")


def wait_size(guest: LinuxGuest, name: str, size: int, *, timeout: float = POLL_SECONDS) -> int:
    """Wait until the guest's ``blockdev --getsize64`` of ``name`` is ``size``; returns it."""
    script = _poll(f"[ \"$(blockdev --getsize64 /dev/{name})\" = {size} ]", int(timeout / 0.2))
    guest.run(script, timeout=timeout + 30)
    return int(guest.check(f"blockdev --getsize64 /dev/{name}"))


def disk_by_vendor(guest: LinuxGuest, vendor: str, *, timeout: float = POLL_SECONDS) -> str:
    """The guest's name (``sdX``) of the one SCSI disk whose vendor is ``vendor`` (a
    ``device='lun'`` disk carries no serial of ours; the target's own vendor tells it)."""
    find = (f"d=$(grep -lx '{vendor} *' /sys/block/sd*/device/vendor 2>/dev/null | head -n1)"
            " && [ -n \"$d\" ]")
    out = guest.check(_poll(find, int(timeout / 0.2)) + "; echo ${d#/sys/block/} | cut -d/ -f1",
                      timeout=timeout + 30)
    return out.strip()


def follow_migrated(guest: LinuxGuest, dest_conn: libvirt.virConnect, daemon: Any) -> str:
    """Point ``guest`` at itself on the destination after a live migration to ``daemon`` (a
    :class:`~testhosts.guests.private_libvirtd.PrivateLibvirtd`); returns what it answers.

    The destination's libvirt bound the command port in its own ``/var/lib/libvirt`` (libvirt
    9) or ``/run/libvirt`` (libvirt 11), which are ``daemon.base/lib`` and ``/run`` from here.
    """
    dom = dest_conn.lookupByName(guest.name())
    inside = channel_path(dom)
    here = {Path(inside_dir): Path(daemon.base, name) for name, inside_dir in BINDS.items()}
    top = next(d for d in here if inside.is_relative_to(d))
    seen_here = here[top] / inside.relative_to(top)
    guest.moved(dom, seen_here)
    return guest.check("echo moved; cat /proc/uptime")
