"""The demo's optional guest view: the story on two small Linux guests, told from inside too.

``python -m testhosts.demo --guest-view`` boots the project's Linux test guest
(``testhosts/linuxguest`` of a source checkout: Debian's kernel and busybox in an initramfs,
under QEMU's TCG) instead of two OS-less guests, and prints a line from inside each guest at each
step: what its kernel says about the disk, what it reads, how its own write is refused. The
image is built on first use (``apt-get download``, cached under
``/var/tmp/virtdriver-linuxguest``); booting both guests costs some 20-30 s of TCG (more on a
loaded host), which is why the view is asked for, not the default: the plain demo stays a few
seconds on a fresh machine.
"""

from __future__ import annotations

import concurrent.futures
import shutil
from pathlib import Path
from typing import Any

import libvirt


class GuestViewUnavailable(Exception):
    """The Linux test guest cannot be had here (no source checkout, no packages)."""


def image() -> Path:
    """The cached Linux test guest, built first if missing."""
    try:
        from testhosts.linuxguest import build
    except ImportError:
        raise GuestViewUnavailable("the guest view needs virtdriver's source tree (its "
                                   "testhosts/linuxguest): run the demo from a checkout, "
                                   "e.g. scripts/demo.sh --guest-view") from None
    try:
        return build()
    except (RuntimeError, OSError) as exc:
        raise GuestViewUnavailable(f"cannot build the Linux test guest: {exc}") from None


def private_copy(root: Path, workspace: Path) -> Path:
    """The kernel and initramfs copied into the demo's workspace: its libvirt (the embedded one)
    then finds no ownership notes another libvirt's DAC driver left on the cached files."""
    copy = workspace / "linuxguest"
    copy.mkdir()
    for name in ("vmlinuz", "initrd.gz"):
        shutil.copyfile(root / name, copy / name)
    return copy


class LinuxPair:
    """Two booted Linux guests on ``conn``; :meth:`close` removes them."""

    def __init__(self, conn: libvirt.virConnect, root: Path) -> None:
        from testhosts.linuxguest import LinuxGuests

        self.made = LinuxGuests(conn, root)
        self.guests: dict[str, Any] = {}

    def start(self, *names: str) -> list[libvirt.virDomain]:
        started = [self.made.start(n, wait=False) for n in names]
        with concurrent.futures.ThreadPoolExecutor(len(started)) as pool:
            list(pool.map(lambda g: g.wait_ready(self.made.boot_timeout), started))
        for _name, guest in zip(names, started):
            self.guests[guest.name()] = guest
        return [g.dom for g in started]

    def disk(self, dom: libvirt.virDomain, serial: str, timeout: int = 30) -> str:
        """The guest's name for the SCSI disk of unit serial ``serial`` (``sdX``)."""
        out = self.guests[dom.name()].check(
            f"n=0; until d=$(grep -l '{serial}' /sys/block/sd*/device/vpd_pg80 2>/dev/null);"
            f" [ -n \"$d\" ]; do n=$((n+1)); [ $n -ge {timeout * 5} ] && exit 1; sleep 0.2;"
            " done; echo $d | cut -d/ -f4", timeout=timeout + 30)
        return out.strip()

    def say(self, dom: libvirt.virDomain, command: str) -> str:
        """``command`` run in the guest: its last line of output, and its exit code if not 0."""
        res = self.guests[dom.name()].run(command)
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        last = lines[-1].strip() if lines else ""
        return last if res.rc == 0 else f"{last} (exit {res.rc})"

    def close(self) -> None:
        self.made.close()
