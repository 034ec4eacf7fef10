"""Who may share a volume's data: the sharing rules, as pure functions over the host's users.

The hypervisor layer describes what it read from libvirt as :class:`Use` records (one per disk of
one guest, live or defined); these functions answer "may this happen?" by raising a
:class:`~virtdriver.errors.PolicyRefusal` that says why, and "what is dangerous here?" by
returning :class:`Danger` records. ``audit`` reports with the same functions the driver refuses
with, so the two cannot drift.

``data`` is the canonical identity of the data behind a disk (a device number, a file's inode, a
network volume's protocol, hosts and name; see :mod:`virtdriver.hypervisor.dataid`): two disks
with equal ``data`` are the same bytes whatever their paths or volume ids say.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from virtdriver.errors import (
    InvalidAttachRequest,
    MultiattachNotSupported,
    VolumeInUse,
)

DIRECT_CACHE_MODES: Final = ("none", "directsync")


@dataclass(frozen=True)
class Use:
    """One disk of one guest, as the sharing rules see it."""

    guest: str
    guest_uuid: str
    volume: str | None  # the volume id it serves; None for a disk virtdriver did not attach
    data: Hashable | None  # canonical identity of the data; None when unknown
    shareable: bool
    readonly: bool
    cache: str | None = None
    format: str | None = None
    labels: tuple[str, ...] = ()
    device: str = ""
    live: bool = True


@dataclass(frozen=True)
class Danger:
    """Something unsafe about the attachments of one volume (``audit`` reports these)."""

    kind: str  # audit.DANGER_KINDS
    message: str


def _guests(uses: Iterable[Use]) -> list[str]:
    return sorted({u.guest for u in uses})


def users_of(volume: str, data: Hashable | None, uses: Iterable[Use]) -> list[Use]:
    """The disks that are ``volume``, or hold the same data under any other name."""
    return [u for u in uses if u.volume == volume or (data is not None and u.data == data)]


def refuse_attach(volume: str, data: Hashable | None, multiattach: bool, guest_uuid: str,
                  guest: str, uses: Sequence[Use]) -> None:
    """Refuse attaching ``volume`` (whose data is ``data``) to one more guest, if unsafe.

    Refused: the guest has the volume already; another guest has it and it is not multiattach,
    or has it without ``<shareable/>``; the same data is in use under another volume id or
    outside virtdriver (two ids for one device make each id's detach tear down the other's).
    """
    mine = [u for u in uses if u.volume == volume and u.guest_uuid == guest_uuid]
    if mine:
        raise VolumeInUse(f"volume {volume} is already attached to {guest} as "
                          f"{mine[0].device or 'a disk'}")
    others = [u for u in uses if u.volume == volume]
    if others and not multiattach:
        raise VolumeInUse(f"volume {volume} is attached to {', '.join(_guests(others))} on this "
                          "host and is not multiattach; refusing to attach it to another guest")
    unshared = [u for u in others if not u.shareable]
    if unshared:
        raise VolumeInUse(f"volume {volume} is attached to {', '.join(_guests(unshared))} "
                          "without <shareable/>; detach it there first")
    if data is None:
        return
    aliens = [u for u in uses if u.data == data and u.volume != volume]
    if aliens:
        names = ", ".join(f"{u.guest} ({'volume ' + u.volume if u.volume else 'not a volume'})"
                          for u in sorted(aliens, key=lambda u: (u.guest, u.volume or "")))
        raise VolumeInUse(f"the data of volume {volume} is already used by {names} under "
                          "another name; refusing to share it")


def refuse_moved_device(volume: str, data: Hashable | None, uses: Sequence[Use]) -> None:
    """Refuse attaching ``volume`` on device ``data`` while a running guest holds the volume on
    another device: its device path (a by-path link) moved since, and one is not the volume."""
    if not (isinstance(data, tuple) and data[:1] == ("dev",)):
        return
    held = sorted({u.guest for u in uses if u.volume == volume and u.live
                   and isinstance(u.data, tuple) and u.data[:1] == ("dev",) and u.data != data})
    if held:
        raise VolumeInUse(f"volume {volume} is held by {', '.join(held)} on another device than "
                          "its device path leads to now (the link moved); find which device is "
                          "the volume before attaching it again")


def refuse_fan_out(volume: str, multiattach: bool, guests: Sequence[str]) -> None:
    """Refuse an attach-many request that names no guest, or one guest twice, or several guests
    for a volume that is not multiattach."""
    if not guests:
        raise InvalidAttachRequest(f"no guest was named to attach volume {volume} to")
    twice = sorted({g for g in guests if list(guests).count(g) > 1})
    if twice:
        raise InvalidAttachRequest(f"the same guest is named twice: {', '.join(twice)}")
    if len(guests) > 1 and not multiattach:
        raise MultiattachNotSupported(f"volume {volume} is not multiattach; it cannot be "
                                      f"attached to {len(guests)} guests")


def still_used(volume: str, data: Hashable | None, uses: Iterable[Use]) -> list[str]:
    """Guests on this host that still use the volume or its data (the host side must stay)."""
    return _guests(users_of(volume, data, uses))


def dangers(uses: Sequence[Use]) -> list[Danger]:
    """What is unsafe about these disks, which hold one volume's data."""
    found = []
    guests = _guests(uses)
    shared = len(guests) > 1
    if shared and any(not u.readonly for u in uses):  # read-only everywhere: nothing goes stale
        unshared = _guests(u for u in uses if not u.shareable)
        if unshared:
            found.append(Danger("unshared", (
                f"attached to {', '.join(guests)} but not <shareable/> in {', '.join(unshared)}: "
                "each QEMU assumes it is the only writer (block devices and network disks are "
                "not locked)")))
        cached = sorted({f"{u.guest} (cache={u.cache or 'default'})" for u in uses
                         if u.cache not in DIRECT_CACHE_MODES})
        if cached:
            found.append(Danger("cache", (
                f"attached to {', '.join(guests)} but cached on the host in {', '.join(cached)}: "
                "that guest reads stale data and writes late; use cache='none'")))
    if shared and len({u.labels for u in uses}) > 1:
        seen: dict[tuple[str, tuple[str, ...]], Use] = {}
        for u in uses:
            seen.setdefault((u.guest, u.labels), u)
        described = "; ".join(f"{u.guest}: {' '.join(u.labels) or 'none (libvirt decides)'}"
                              for u in seen.values())
        found.append(Danger("labels", (
            f"per-disk labels differ ({described}): relabelling the data for one guest can "
            "cut the others off")))
    formats = sorted({f"{u.guest} ({u.format})" for u in uses
                      if u.shareable and not u.readonly and u.format not in (None, "raw")})
    if formats:
        found.append(Danger("format", (
            f"shared read-write but not raw in {', '.join(formats)}: two QEMUs writing an image "
            "format's metadata corrupt it; libvirt allows shared writes to raw images only")))
    ids = sorted({u.volume for u in uses if u.volume is not None})
    if len(ids) > 1:
        found.append(Danger("identity", (
            f"one device or file serves several volume ids ({', '.join(ids)}): detaching one "
            "id can tear down the host connection the others use")))
    return found
