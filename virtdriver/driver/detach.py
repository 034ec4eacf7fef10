"""Detach as steps: find the attachment, remove it (live, then the definition) waiting for
libvirt's device-removed event, then release the host side if no guest uses the volume or its
data any more -- all under the volume's lock and its data's lock. Also the operator's way out of
a leak (:func:`release`) and the removal of a failed attach (:func:`undo_attach`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import libvirt

from virtdriver.config import Disk
from virtdriver.driver.compute_host import ComputeHost
from virtdriver.driver.request import copy_info
from virtdriver.errors import (
    DamagedRecord,
    DetachFailed,
    DetachTimeout,
    GuestLeft,
    HypervisorError,
    InstanceNotFound,
    NotAttached,
    VirtDriverError,
    VolumeInUse,
)
from virtdriver.hypervisor.connection import libvirt_message
from virtdriver.hypervisor.domains import (
    DiskUse,
    DomainState,
    DomainsView,
    DomainXml,
    ListedDomain,
)
from virtdriver.hypervisor.metadata import note_shared_write, set_note
from virtdriver.policy.identity import check_requested_volume_id, volume_of_alias
from virtdriver.policy.migration import ARRIVING
from virtdriver.policy.sharing import still_used

LOG = logging.getLogger("virtdriver.driver")
# libvirt's words when QEMU went away under a running call (the guest is being destroyed).
MONITOR_CLOSED = "End of file from qemu monitor"


def detach(host: ComputeHost, instance: str, volume_id: str, timeout: float,
           connection_info: Mapping[str, Any] | None = None) -> None:
    """Detach one attachment; release the host side when nobody uses the volume any more."""
    check_requested_volume_id(volume_id)
    dom = host.connection.domain(instance)
    # Before the lock is waited for: a guest that leaves by live migration meanwhile is told
    # from one that stopped by its lifecycle event, which only a subscription sees.
    host.connection.events.watch()
    with host.lock([volume_id], [], "detach"):
        state = _read_guest(host, dom, instance, volume_id)
        try:
            host.forget_arrivals(volume_id, guest=state)  # it is here: not arriving any more
        except DamagedRecord:
            pass  # housekeeping only: the release below says what the damage means
        mine = [u for u in state.disks if u.volume == volume_id]
        if not mine:
            raise NotAttached(not_attached_message(volume_id, state))
        data = mine[0].data
        with host.data_locked(data, f"volume {volume_id}", "detach"):
            # The other guests are read while this one releases the device (under the locks
            # all the same); this guest is read again once its disks are gone. A failed read
            # is left to the release step, which reads the whole host again.
            others: list[DomainsView | None] = []

            def read_others() -> None:
                try:
                    others.append(host.view(skip=state.uuid, arriving=False))
                except VirtDriverError:
                    others.append(None)

            for use in sorted(mine, key=lambda u: not u.live):  # live first, then the definition
                _remove(host, dom, use, timeout, None if others else read_others)
            props = dict(copy_info(connection_info)["data"]) if connection_info else None
            try:
                view = None
                if others and others[0] is not None:
                    view = host.view(others[0].domains + _fresh(host, state))
                users = host.release_unless_used(volume_id, data, props, view=view)
            except DamagedRecord as exc:  # the disk is gone: the detach itself succeeded
                LOG.error("volume %s was detached from %s, but its host connection was not "
                          "released: %s", volume_id, state.name, exc)
                return
            except VirtDriverError as exc:
                LOG.error("volume %s was detached from %s, but its host connection could not be "
                          "released (%s); retry with 'virtdriver release %s'", volume_id,
                          state.name, exc, volume_id)
                return
            if users:
                LOG.info("volume %s stays connected on this host: still used by %s", volume_id,
                         ", ".join(users))


def _read_guest(host: ComputeHost, dom: libvirt.virDomain, instance: str,
                volume_id: str) -> DomainState:
    """The guest, read under the volume's lock; a guest that is gone meanwhile (a migration
    held the lock, or it was destroyed) is said to be gone, and how, never detached."""
    if exists(dom):
        return host.state(dom)
    if host.connection.events.left_by_migration(dom.UUIDString()):
        raise GuestLeft(left_message(dom.name(), volume_id))
    raise InstanceNotFound(f"guest {instance} is no longer on this host; volume {volume_id} "
                           "was not detached")


def left_message(guest: str, volume_id: str) -> str:
    return (f"guest {guest} left this host by live migration while the detach waited: volume "
            f"{volume_id} was not detached (it went along; detach it on the guest's new host)")


def not_attached_message(volume_id: str, state: DomainState) -> str:
    """Says which volumes the guest has, and names a near miss (another case or spelling)."""
    attached = sorted({u.volume for u in state.disks if u.volume})
    near = [v for v in attached if v.lower().replace("-", "") ==
            volume_id.lower().replace("-", "")]
    text = f"volume {volume_id} is not attached to {state.name}"
    if near:
        return f"{text}; did you mean {near[0]}? (volume ids are matched exactly)"
    if attached:
        return f"{text} (attached: {', '.join(attached)})"
    return f"{text} (it has no volumes)"


def _fresh(host: ComputeHost, state: DomainState) -> list[DomainXml]:
    """The guest's XML read again, once its disks are gone (none if the guest went too)."""
    listed = ListedDomain(state.dom, state.name, state.uuid, state.active, state.persistent)
    try:
        return [listed.read()]  # stopped meanwhile: both reads give its definition
    except libvirt.libvirtError as exc:
        if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
            raise HypervisorError(f"cannot read guest {state.name}",
                                  libvirt_message(exc)) from None
        return []


def _remove(host: ComputeHost, dom: libvirt.virDomain, use: DiskUse, timeout: float,
            while_waiting: Callable[[], None] | None = None) -> None:
    alias = use.device_alias or ""
    if use.live:
        detach_live(host, dom, use.disk, alias, timeout, while_waiting)
    else:
        try:
            dom.detachDeviceFlags(use.disk.to_xml(), libvirt.VIR_DOMAIN_AFFECT_CONFIG)
        except libvirt.libvirtError as exc:
            raise DetachFailed(f"cannot remove volume {use.volume} from the definition of "
                               f"{dom.name()}", libvirt_message(exc)) from None
    if use.inherited_from is not None:
        set_note(dom, alias, None, "", live=use.live, persistent=not use.live)
    if use.shared_write is not None:
        note_shared_write(dom, alias, None, live=use.live, persistent=not use.live)


def detach_live(host: ComputeHost, dom: libvirt.virDomain, disk: Disk, alias: str,
                timeout: float, while_waiting: Callable[[], None] | None = None) -> None:
    """Detach from the running guest and wait for libvirt's device-removed event
    (``while_waiting`` is called once the guest was asked, before the wait)."""
    removals = host.connection.events
    uuid = dom.UUIDString()
    volume = volume_of_alias(alias) or alias  # for messages: what the operator asked about
    removals.expect(uuid, alias)
    try:
        try:
            dom.detachDeviceFlags(disk.to_xml(), libvirt.VIR_DOMAIN_AFFECT_LIVE)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_DEVICE_MISSING:
                return  # already gone
            if not running(dom) or MONITOR_CLOSED in libvirt_message(exc):
                # The guest stopped meanwhile: its stop event (which says how) ends the wait.
                ended = removals.stop_detail(uuid) is not None or removals.wait(
                    uuid, alias, timeout) is not None
                if removals.left_by_migration(uuid):
                    raise GuestLeft(left_message(dom.name(), volume)) from None
                if ended or not running(dom):
                    return  # it went with the guest
            raise DetachFailed(f"libvirt refused to detach {volume} from {dom.name()}",
                               libvirt_message(exc)) from None
        if while_waiting is not None:
            while_waiting()
        result = removals.wait(uuid, alias, timeout)
        if removals.left_by_migration(uuid):
            raise GuestLeft(left_message(dom.name(), volume))
    finally:
        removals.forget(uuid, alias)
    if result is False:
        raise DetachFailed(f"guest {dom.name()} refused to release volume {volume}")
    if result is None and running(dom) and any(u.device_alias == alias and u.live
                                               for u in host.state(dom).disks):
        raise DetachTimeout(f"guest {dom.name()} did not release volume {volume} within "
                            f"{timeout:g} s; it stays attached (retry the detach later)")


def undo_attach(host: ComputeHost, dom: libvirt.virDomain, alias: str) -> bool:
    """Remove whatever part of a failed attach made it into the guest (the disk with ``alias``);
    ``False`` when some of it could not be removed (logged)."""
    try:
        uses = host.state(dom).disks
    except HypervisorError:
        if exists(dom):
            raise
        return True  # the guest vanished (a destroyed transient guest): nothing left to undo
    undone = True
    for use in sorted(uses, key=lambda u: not u.live):
        if use.device_alias != alias:
            continue
        try:
            if use.live:
                detach_live(host, dom, use.disk, alias, host.options.detach_timeout)
            else:
                dom.detachDeviceFlags(use.disk.to_xml(), libvirt.VIR_DOMAIN_AFFECT_CONFIG)
        except (libvirt.libvirtError, VirtDriverError) as exc:
            LOG.error("could not undo the attach of %s to %s: %s", alias, dom.name(), exc)
            undone = False
    return undone


def release(host: ComputeHost, volume_id: str) -> bool:
    """The operator's way out of a leak: release a volume's recorded host side, under its lock,
    only when no guest on this host uses the volume. ``False`` when nothing was recorded."""
    check_requested_volume_id(volume_id)
    with host.lock([volume_id], [], "release"):
        users = still_used(volume_id, None, host.users(volume_id, None))
        waiting = [u.removesuffix(ARRIVING) for u in users if u.endswith(ARRIVING)]
        if users and len(waiting) == len(users):
            raise VolumeInUse(f"volume {volume_id} is prepared for {', '.join(waiting)}, arriving "
                              "by live migration; if that migration failed, or the guest came "
                              f"and went, undo it with 'virtdriver migrate-abort {waiting[0]} "
                              f"{volume_id}'")
        if users:
            raise VolumeInUse(f"volume {volume_id} is still used by {', '.join(users)} on this "
                              "host; detach it there instead")
        record = host.records.load(volume_id)
        if record is None:
            return False
        host.release(volume_id)
        LOG.warning("released the host connection of volume %s (%s %s)", volume_id,
                    record.protocol or "no os-brick connection",
                    record.device_info.get("path") or record.mount_point or "")
        return True


def running(dom: libvirt.virDomain) -> bool:
    """Whether the guest still runs; a guest that is gone or shut off has no live devices."""
    try:
        return bool(dom.isActive())
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            return False
        raise HypervisorError(f"cannot read guest {dom.name()}", libvirt_message(exc)) from None


def exists(dom: libvirt.virDomain) -> bool:
    """False once libvirt no longer knows the domain (a transient guest that was destroyed)."""
    try:
        dom.info()
    except libvirt.libvirtError as exc:
        return exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN
    return True
