"""Extend as steps: grow a volume for every guest on this host that uses it (or one of them).

Under the volume's and its data's locks: refuse what cannot work before anything changes (a
protocol that cannot grow online, a size smaller than a guest sees now, storage that has not
grown), refresh the host side once through os-brick, then show the new size to each running
guest's QEMU -- a read-write attachment by a block resize, a read-only one by opening its protocol
node anew (:mod:`virtdriver.hypervisor.resize`). A guest that is shut off sees the new size when it
starts. The result says, per guest, the size its QEMU shows, how it got there, whether the guest
was told, and for any guest left behind why and the command that brings it up to date: never a
partial success that looks like a whole one.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, TypedDict

import libvirt

from virtdriver.config import Disk
from virtdriver.driver.compute_host import ComputeHost
from virtdriver.driver.request import VolumeRequest
from virtdriver.errors import (
    ExtendIncomplete,
    ExtendRefused,
    HypervisorError,
    InvalidRequest,
    NotAttached,
)
from virtdriver.formatting import human
from virtdriver.hypervisor import brick
from virtdriver.hypervisor.connection import libvirt_message
from virtdriver.hypervisor.dataid import host_size
from virtdriver.hypervisor.domains import DiskUse
from virtdriver.hypervisor.resize import resize_disk


@dataclass(frozen=True)
class GuestSize:
    """One attachment after an extend."""

    guest: str
    guest_uuid: str
    device: str
    attach_mode: str
    running: bool
    size: int | None  # bytes its QEMU shows now (None: shut off)
    how: str  # resized | reopened | unchanged | at start | failed
    guest_notified: bool  # QEMU told the guest device of the new size
    problem: str | None = None  # why QEMU does not show the new size
    fix: str | None = None  # the one command that brings this attachment up to date

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class _Attached(TypedDict):
    """The fields of a :class:`GuestSize` that say which attachment it is."""

    guest: str
    guest_uuid: str
    device: str
    attach_mode: str
    running: bool


@dataclass(frozen=True)
class ExtendResult:
    """What an extend did on this host."""

    volume_id: str
    size: int  # the size asked for, in bytes
    host_size: int | None  # what the host sees after os-brick's refresh (None: not known here)
    guests: list[GuestSize]

    @property
    def complete(self) -> bool:
        """Every running guest's QEMU shows the new size."""
        return all(g.size == self.size for g in self.guests if g.running)

    def left_behind(self) -> list[GuestSize]:
        return [g for g in self.guests if g.running and g.size != self.size]

    def to_json(self) -> dict[str, Any]:
        return {"volume_id": self.volume_id, "size": self.size, "host_size": self.host_size,
                "complete": self.complete, "guests": [g.to_json() for g in self.guests]}

    def incomplete_error(self) -> ExtendIncomplete:
        parts = [f"{g.guest} shows {g.size if g.size is not None else 'an unknown size'} bytes "
                 f"({g.problem}); {g.fix}" for g in self.left_behind()]
        return ExtendIncomplete(f"volume {self.volume_id} was grown to {self.size} bytes, but "
                                + "; ".join(parts))


def extend(host: ComputeHost, connection_info: Mapping[str, Any], new_size: int | None = None,
           instance: str | None = None) -> ExtendResult:
    """Grow an attached volume for every guest here that uses it (only ``instance``, if given)
    to ``new_size`` bytes (default: the size the host sees after os-brick's refresh)."""
    request = VolumeRequest.parse(connection_info, host.options.render_options())
    if new_size is not None and (isinstance(new_size, bool) or not isinstance(new_size, int)
                                 or new_size <= 0):
        raise InvalidRequest(f"new size {new_size!r} is not a positive number of bytes")
    refusal = request.driver.extend_refusal(request.options)
    if refusal is not None:
        raise ExtendRefused(f"volume {request.vid} cannot be extended while attached: {refusal}")
    with host.lock([request.vid], request.lock_data(request.data_before_connect()), "extend"):
        users = _users(host, request.vid, instance)
        current = {id(u): _size(dom, u) for dom, u in users if u.live}
        if new_size is not None:
            _refuse_shrink(request.vid, new_size, current)
        grown = _refresh_host(host, request, [u for _, u in users])
        if new_size is None:
            if grown is None:
                raise InvalidRequest(f"this host cannot tell the new size of volume "
                                     f"{request.vid}: give the size")
            new_size = grown
            _refuse_shrink(request.vid, new_size, current)
        elif grown is not None and grown < new_size:
            raise ExtendRefused(f"the host sees volume {request.vid} at {grown} bytes, less "
                                f"than {new_size}: extend it on the storage side first")
        elif grown is not None and grown > new_size:
            raise ExtendRefused(f"the host sees volume {request.vid} at {human(grown)} ({grown} "
                                f"bytes), more than the {human(new_size)} ({new_size} bytes) "
                                "asked: give that size, or none")
        sized = [_show(dom, u, new_size, current.get(id(u))) for dom, u in users]
    return ExtendResult(request.vid, new_size, grown, sized)


def _users(host: ComputeHost, vid: str,
           instance: str | None) -> list[tuple[libvirt.virDomain, DiskUse]]:
    """The running guests' live disks and the shut-off guests' defined ones serving ``vid``."""
    users = [(state.dom, u) for state in host.states(mentioning=vid)
             if instance is None or state.is_instance(instance)
             for u in state.disks if u.volume == vid and u.live == state.active]
    if not users:
        where = f"guest {instance}" if instance is not None else "any guest on this host"
        if instance is not None:
            host.find(instance)  # InstanceNotFound for a guest that does not exist
        raise NotAttached(f"volume {vid} is not attached to {where}")
    return users


def _size(dom: libvirt.virDomain, use: DiskUse) -> int:
    try:
        return int(dom.blockInfo(use.device)[0])
    except libvirt.libvirtError as exc:
        raise HypervisorError(f"cannot read the size of {use.device} of {use.domain_name}",
                              libvirt_message(exc)) from None


def _refuse_shrink(vid: str, new_size: int, current: dict[int, int]) -> None:
    if current and new_size < max(current.values()):
        raise ExtendRefused(f"volume {vid} is {max(current.values())} bytes; shrinking it to "
                            f"{new_size} would destroy data")


def _refresh_host(host: ComputeHost, request: VolumeRequest, users: list[DiskUse]) -> int | None:
    """os-brick's extend (a rescan) once for the host; the size the host sees, if it can tell."""
    grown = None
    if request.protocol is not None:
        grown = brick.extend(request.protocol, dict(request.data), host.options.state_dir,
                             **host.extend_connector_options(request))
    source = users[0].disk.source
    if grown is None and source is not None and source.file:
        grown = host_size(users[0].disk)  # a file on a share: visible here as it is
    return grown


def _show(dom: libvirt.virDomain, use: DiskUse, new_size: int,
          current: int | None) -> GuestSize:
    mode = "ro" if use.disk.readonly else "rw"
    base = _Attached(guest=use.domain_name, guest_uuid=use.domain_uuid, device=use.device,
                     attach_mode=mode, running=use.live)
    if not use.live:
        return GuestSize(**base, size=None, how="at start", guest_notified=False)
    if current == new_size:
        return GuestSize(**base, size=current, how="unchanged", guest_notified=False)
    try:
        done = resize_disk(dom, use.disk, new_size)
    except HypervisorError as exc:
        return GuestSize(**base, size=current, how="failed", guest_notified=False,
                         problem=str(exc), fix=_fix(dom, use))
    if done.size != new_size:
        return GuestSize(**base, size=done.size, how="failed", guest_notified=False,
                         problem=f"QEMU reports {done.size} bytes after the {done.how}",
                         fix=_fix(dom, use))
    return GuestSize(**base, size=done.size, how=done.how, guest_notified=done.guest_notified)


def _fix(dom: libvirt.virDomain, use: DiskUse) -> str:
    """The one command that brings a guest left behind up to date."""
    if use.disk.readonly:  # (an explicit ro is taken from every shape: read-only wins)
        detach = f"virtdriver detach {use.domain_name} {use.volume}"
        kept = _kept(use.disk)
        cinder = _cinder_note(dom, use.volume)
        if cinder is not None:  # detach deletes that attachment: attach makes a new one
            return (f"detach and attach it again through Cinder: {detach} && virtdriver attach "
                    f"{use.domain_name} --cinder {shlex.quote(cinder)} --volume {use.volume} "
                    f"--attach-mode ro{kept}")
        shared = " --multiattach" if use.disk.shareable else ""
        return (f"detach and attach it again: {detach} && virtdriver attach {use.domain_name} "
                f"CONNECTION_INFO --attach-mode ro{shared}{kept}")
    return f"run again for it: virtdriver extend CONNECTION_INFO {use.domain_name}"


def _kept(disk: Disk) -> str:
    """The attach options that give a disk its own device kind and policies again."""
    kept = " --device lun" if disk.device == "lun" else ""
    driver = disk.driver
    if driver is not None:
        if driver.cache == "directsync":
            kept += " --cache directsync"
        if driver.error_policy in ("stop", "report", "ignore", "enospace"):
            kept += f" --error-policy {driver.error_policy}"
        if driver.rerror_policy in ("stop", "report", "ignore"):
            kept += f" --rerror-policy {driver.rerror_policy}"
    return kept


def _cinder_note(dom: libvirt.virDomain, volume: str | None) -> str | None:
    """The Cinder URL of the attachment ``attach --cinder`` made for this disk, if it did."""
    from virtdriver.cinder.flow import notes_of

    try:
        note = notes_of(dom).get(volume or "")
    except HypervisorError:
        return None
    return note[1] if note else None


def extend_one(host: ComputeHost, instance: str, connection_info: Mapping[str, Any],
               new_size: int) -> int:
    """The compute API's extend for one guest: the size its QEMU now shows, in bytes; a guest
    left behind is :class:`~virtdriver.errors.ExtendIncomplete`."""
    if isinstance(new_size, bool) or not isinstance(new_size, int) or new_size <= 0:
        raise InvalidRequest(f"new size {new_size!r} is not a positive number of bytes")
    result = extend(host, connection_info, new_size, instance)
    running = [g for g in result.guests if g.running]
    if not running:
        raise NotAttached(f"volume {result.volume_id} is not attached to a running {instance}")
    if not result.complete:
        raise result.incomplete_error()
    return int(running[0].size or 0)
