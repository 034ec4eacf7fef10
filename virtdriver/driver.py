"""The volume driver a compute service loads: attach, detach, list, capabilities.

    from virtdriver import LibvirtVolumeDriver
    driver = LibvirtVolumeDriver("qemu:///system")
    attachment = driver.attach_volume(connection_info, "guest-a", attach_mode="ro")
    driver.detach_volume("guest-a", attachment.volumeId)
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import libvirt

from virtdriver.config import Disk
from virtdriver.errors import (
    AttachFailed,
    DetachFailed,
    DetachTimeout,
    ExtendRefused,
    HypervisorError,
    InvalidConnectionInfo,
    MultiattachNotSupported,
    NotAttached,
    SwapFailed,
    VirtDriverError,
    VolumeInUse,
)
from virtdriver.attachment import ALIAS_PREFIX, Attachment, describe_source
from virtdriver.hypervisor import brick
from virtdriver.hypervisor.capabilities import host_capabilities
from virtdriver.hypervisor.connection import Connection, libvirt_message
from virtdriver.hypervisor.hostconn import HostConnections
from virtdriver.hypervisor.locks import guest_generation, guest_lock, volume_lock
from virtdriver.hypervisor.metadata import set_note
from virtdriver.hypervisor.mounts import check_guest_sees, ensure_shared
from virtdriver.hypervisor.targets import bus_for, pick_target
from virtdriver.hypervisor.blockcopy import copy_and_pivot
from virtdriver.hypervisor.usage import (
    AttachTarget,
    DiskUse,
    DomainState,
    HostScan,
    ListedDomain,
    host_state,
    list_domains,
    read_domains,
    source_token,
)
from virtdriver.policy import check_attach_mode
from virtdriver.render import build_disk, check_nesting, volume_id
from virtdriver.secrets import redact, secret_values
from virtdriver.volume import RenderOptions, get_driver, iscsi

LOG = logging.getLogger(__name__)

DEFAULT_STATE_DIR = Path("/var/lib/virtdriver")
REMOTEFS_PROTOCOLS = ("NFS", "GLUSTERFS", "QUOBYTE", "VZSTORAGE")
# libvirt's words when QEMU went away under a running call (the guest is being destroyed).
MONITOR_CLOSED = "End of file from qemu monitor"


@dataclasses.dataclass(frozen=True)
class _AttachRequest:
    """An attach's connection_info (a private copy) and what follows from it."""

    info: dict[str, Any]
    vid: str
    alias: str
    multiattach: bool
    protocol: str | None  # os-brick's, None when QEMU connects by itself


class LibvirtVolumeDriver:
    """Attach and detach volumes on one libvirt host, multiattach-safe.

    ``state_dir`` holds the per-volume locks and the host-connection records;
    ``mount_base`` is where shares (NFS, GlusterFS, ...) are mounted.
    """

    def __init__(self, uri: str = "qemu:///system", *, state_dir: str | Path = DEFAULT_STATE_DIR,
                 mount_base: str | Path | None = None, label_policy: str = "auto",
                 shared_image_label: str | None = None, detach_timeout: float = 30.0,
                 native_iscsi: bool = False, native_glusterfs: bool = False) -> None:
        self.uri = uri
        self.state_dir = Path(state_dir)
        self.lock_dir = self.state_dir / "locks"
        self.mount_base = str(mount_base) if mount_base else str(self.state_dir / "mnt")
        self.label_policy = label_policy
        self.shared_image_label = shared_image_label
        self.detach_timeout = detach_timeout
        self.native_iscsi = native_iscsi
        self.native_glusterfs = native_glusterfs
        self.connection = Connection(uri)
        self.host = HostConnections(self.state_dir)

    def prepare_host(self) -> None:
        """Make the mount base a shared mount point now (a compute service calls this when it
        starts, before it starts guests). Attaching a share does it too, but a guest started
        before that cannot see shares mounted later and is refused until it restarts."""
        ensure_shared(self.mount_base, self.lock_dir)

    # ---- queries ----------------------------------------------------------------------------

    def list_attachments(self, instance: str) -> list[Attachment]:
        """The volumes attached to a guest (live state for a running guest)."""
        uses = self._domain_disks(self.connection.domain(instance))
        found: dict[str, Attachment] = {}
        for use in uses:
            att = Attachment.from_use(use)
            if att is not None and att.volumeId not in found:
                found[att.volumeId] = att
        return list(found.values())

    def volume_users(self, volume: str) -> list[DiskUse]:
        """Every disk on this host that is ``volume`` (a volume id)."""
        return self._users(ALIAS_PREFIX + volume)

    def connector_properties(self, attach_mode: str = "rw", *, my_ip: str = "127.0.0.1",
                             multipath: bool = False) -> dict[str, Any]:
        """os-brick's host connector properties plus ``mode``, for the storage service."""
        props = brick.connector_properties(self.state_dir, my_ip=my_ip, multipath=multipath)
        props["mode"] = check_attach_mode(attach_mode)
        return props

    def capabilities(self) -> dict[str, Any]:
        """What this host supports, read from the running libvirt and QEMU."""
        return host_capabilities(self.connection.get())

    # ---- attach -----------------------------------------------------------------------------

    def attach_volume(self, connection_info: Mapping[str, Any], instance: str, *,
                      attach_mode: str = "rw", target_dev: str | None = None,
                      bus: str | None = None, device: str = "disk",
                      luks_secret_uuid: str | None = None) -> Attachment:
        """Connect the host side, render, and attach to the guest (live and persistent).

        Anything that fails after the host connect is undone, the host connect included unless
        another local guest still uses the volume.
        """
        check_attach_mode(attach_mode)
        request = self._attach_request(connection_info)
        with volume_lock(self.lock_dir, request.vid):
            scan = self._prepare_attach(request, [instance])
            target = scan.targets[0]
            try:
                return self._attach(target, scan, request, attach_mode=attach_mode,
                                    target_dev=target_dev, bus=bus, device=device,
                                    luks_secret_uuid=luks_secret_uuid)
            except VirtDriverError as exc:
                self._undo_attach(target.dom, request.alias)
                self._drop_host_side(request, scan, exc)
                if isinstance(exc, AttachFailed):
                    raise
                raise AttachFailed(f"attaching volume {request.vid} to {target.name} failed",
                                   redact(str(exc), secret_values(request.info))) from None

    def attach_volume_to_many(self, connection_info: Mapping[str, Any],
                              instances: Sequence[str], *,
                              attach_mode: str | Mapping[str, str] = "rw",
                              progress: Callable[[str, Attachment | Exception], None]
                              | None = None, max_parallel: int = 16) -> list[Attachment]:
        """Attach one multiattach volume to many guests: one host connect, parallel attaches.

        All or nothing: if any guest fails, the attachments already made are undone, the host
        side is released, and :class:`AttachFailed` names the guest that failed and why.
        ``attach_mode`` is one mode for all, or a mapping of instance to mode.
        """
        instances = list(instances)
        modes = {i: check_attach_mode(attach_mode.get(i, "rw") if isinstance(attach_mode, Mapping)
                                      else attach_mode, f"attach_mode[{i}]") for i in instances}
        if len(set(instances)) != len(instances):
            raise AttachFailed("the same guest is named twice")
        request = self._attach_request(connection_info)
        if len(instances) > 1 and not request.multiattach:
            raise MultiattachNotSupported(f"volume {request.vid} is not multiattach; it cannot be "
                                          f"attached to {len(instances)} guests")
        with volume_lock(self.lock_dir, request.vid):
            scan = self._prepare_attach(request, instances)
            done: list[tuple[int, Attachment]] = []
            failures: list[tuple[int, Exception]] = []

            def attach(target: AttachTarget, mode: str) -> Attachment:
                return self._attach(target, scan, request, attach_mode=mode,
                                    target_dev=None, bus=None, device="disk",
                                    luks_secret_uuid=None)

            with ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(instances)))) as pool:
                futures = {pool.submit(attach, target, modes[name]): n
                           for n, (name, target) in enumerate(zip(instances, scan.targets))}
                for future in as_completed(futures):
                    n = futures[future]
                    try:
                        result = future.result()
                    except VirtDriverError as exc:
                        failures.append((n, exc))
                        if progress:
                            progress(instances[n], exc)
                        continue
                    done.append((n, result))
                    if progress:
                        progress(instances[n], result)
            if not failures:
                return [att for _, att in sorted(done, key=lambda d: d[0])]
            for n, _ in done + failures:
                self._undo_attach(scan.targets[n].dom, request.alias)
            n, exc = failures[0]
            self._drop_host_side(request, scan, exc)
            raise AttachFailed(f"attaching volume {request.vid} to {len(instances)} guests failed "
                               f"at {instances[n]} ({exc}); the {len(done)} attachments made "
                               "were undone", None) from None

    def _attach_request(self, connection_info: Mapping[str, Any]) -> _AttachRequest:
        info = _copy_info(connection_info)
        vid = _required_volume_id(info)
        protocol = get_driver(info.get("driver_volume_type")).brick_protocol_for(
            self._render_options())
        return _AttachRequest(info, vid, ALIAS_PREFIX + vid, info.get("multiattach") is True,
                              protocol)

    def _prepare_attach(self, request: _AttachRequest, instances: Sequence[str]) -> HostScan:
        """Under the volume lock: read the host, refuse unsafe sharing, connect the host side.

        Each guest's attach generation is read before its disks, so that :meth:`_attach` can
        tell whether the disks read here are still current once it holds the guest's lock.
        """
        try:
            listed = list_domains(self.connection.get())
            found = [self._find_listed(listed, instance) for instance in instances]
            if len({d.uuid for d in found}) != len(found):
                raise AttachFailed("the same guest is named twice (by name and by UUID)")
            generations = [guest_generation(self.lock_dir, d.uuid) for d in found]
            domains = read_domains(listed + [d for d in found if d not in listed])
        except libvirt.libvirtError as exc:
            raise HypervisorError("cannot read the host's guests", libvirt_message(exc)) from None
        by_uuid = {d.listed.uuid: d for d in domains}
        targets = []
        for instance, listed_domain, generation in zip(instances, found, generations):
            if listed_domain.uuid not in by_uuid:  # vanished between the list and the read
                self.connection.domain(instance)  # raises InstanceNotFound
                raise HypervisorError(f"guest {instance!r} changed while it was being read")
            targets.append(AttachTarget(by_uuid[listed_domain.uuid], generation))
        users = [u for d in domains for u in d.state(mentioning=request.vid).disks
                 if u.alias == request.alias]
        for target in targets:
            self._check_sharing(users, target, request.vid, request.multiattach)
        self._connect_host(request.vid, request.protocol, request.info)
        return HostScan(domains, targets, users)

    def _attach(self, target: AttachTarget, scan: HostScan, request: _AttachRequest, *,
                attach_mode: str, target_dev: str | None, bus: str | None, device: str,
                luks_secret_uuid: str | None) -> Attachment:
        # Volume locks do not stop two volumes being attached to one guest at once: choosing a
        # free target and attaching are serialized per guest. The guest's disks read with the
        # host are still current unless another attach raised its generation meanwhile.
        with guest_lock(self.lock_dir, target.uuid) as guest:
            domain = target.domain
            if guest.generation != target.generation:
                try:
                    domain = domain.listed.read()
                except libvirt.libvirtError as exc:
                    raise HypervisorError(f"cannot read guest {target.name}",
                                          libvirt_message(exc)) from None
            state = domain.state()
            try:
                return self._attach_locked(state, scan, request, attach_mode=attach_mode,
                                           target_dev=target_dev, bus=bus, device=device,
                                           luks_secret_uuid=luks_secret_uuid)
            finally:
                guest.changed()

    def _attach_locked(self, state: DomainState, scan: HostScan, request: _AttachRequest, *,
                       attach_mode: str, target_dev: str | None, bus: str | None, device: str,
                       luks_secret_uuid: str | None) -> Attachment:
        vid = request.vid
        disks = [u.disk for u in state.disks]
        has_scsi = any(kind == "scsi" for kind, _ in state.controllers)
        bus = bus or bus_for(target_dev, has_scsi)
        target_dev, unit = pick_target(disks, bus, target_dev, state.name)
        disk = build_disk(request.info, attach_mode=attach_mode, target_dev=target_dev, bus=bus,
                          device=device, scsi_unit=unit, luks_secret_uuid=luks_secret_uuid,
                          mount_base=self.mount_base, label_policy=self.label_policy,
                          shared_image_label=self.shared_image_label,
                          native_iscsi=self.native_iscsi, native_glusterfs=self.native_glusterfs)
        clash = scan.same_data_elsewhere(disk, state, request.alias, request.multiattach)
        if clash:
            raise VolumeInUse(f"the data of volume {vid} ({describe_source(disk)}) is "
                              f"already used by {', '.join(clash)} under another name; refusing "
                              "to share it")
        if state.active and disk.source is not None and disk.source.file:
            check_guest_sees(state.uuid, state.name, disk.source.file, self.mount_base)
        flags = libvirt.VIR_DOMAIN_AFFECT_LIVE if state.active else 0
        if state.persistent:
            flags |= libvirt.VIR_DOMAIN_AFFECT_CONFIG
        try:
            state.dom.attachDeviceFlags(disk.to_xml(), flags)
        except libvirt.libvirtError as exc:
            raise AttachFailed(f"libvirt refused to attach volume {vid} to {state.name}",
                               libvirt_message(exc)) from None
        attachment = Attachment.from_use(DiskUse(state.name, state.uuid, state.active,
                                                 state.active, disk))
        assert attachment is not None  # the disk was rendered with its ua- alias and target
        return attachment

    def _check_sharing(self, users: list[DiskUse], target: AttachTarget | DomainState, vid: str,
                       multiattach: bool) -> None:
        mine = [u for u in users if u.domain_uuid == target.uuid]
        if mine:
            raise AttachFailed(f"volume {vid} is already attached to {target.name} as "
                               f"{mine[0].disk.target.dev if mine[0].disk.target else '?'}")
        others = sorted({u.domain_name for u in users})
        if others and not multiattach:
            raise VolumeInUse(f"volume {vid} is attached to {', '.join(others)} on this host and "
                              "is not multiattach; refusing to attach it to another guest")
        unshared = sorted({u.domain_name for u in users if not u.disk.shareable})
        if unshared:
            raise VolumeInUse(f"volume {vid} is attached to {', '.join(unshared)} without "
                              "<shareable/>; detach it there first")

    def _drop_host_side(self, request: _AttachRequest, scan: HostScan,
                        exc: Exception) -> None:
        """After a failed attach: release the host side unless another guest already used it."""
        if scan.users:
            return
        if isinstance(exc, VolumeInUse):
            self.host.forget(request.vid)  # the device is another attachment's: keep it
        else:
            self._disconnect_quietly(request.vid)

    def _undo_attach(self, dom: libvirt.virDomain, alias: str) -> None:
        """Remove whatever part of a failed attach made it into the guest."""
        try:
            uses = self._domain_disks(dom)
        except HypervisorError:
            if _exists(dom):
                raise
            return  # the guest vanished (a destroyed transient guest): nothing left to undo
        for use in uses:
            if use.alias != alias:
                continue
            flags = libvirt.VIR_DOMAIN_AFFECT_LIVE if use.live else libvirt.VIR_DOMAIN_AFFECT_CONFIG
            try:
                if use.live:
                    self._detach_live(dom, use.disk, alias, self.detach_timeout)
                else:
                    dom.detachDeviceFlags(use.disk.to_xml(), flags)
            except (libvirt.libvirtError, VirtDriverError) as exc:
                LOG.error("could not undo attach of %s to %s: %s", alias, dom.name(), exc)

    # ---- swap, extend -------------------------------------------------------------------------

    def swap_volume(self, instance: str, old_connection_info: Mapping[str, Any],
                    new_connection_info: Mapping[str, Any], *,
                    timeout: float | None = None) -> Attachment:
        """Move a guest's disk from one volume to another, keeping device and attach mode.

        A running guest is copied live (block copy, then pivot); a shut-off one has its
        definition changed. Refused when the old volume is shareable and attached read-write to
        another guest on this host (that guest's writes would not follow the copy).
        """
        old, new = _copy_info(old_connection_info), _copy_info(new_connection_info)
        old_id, new_id = _required_volume_id(old), _required_volume_id(new)
        if old_id == new_id:
            raise SwapFailed(f"volume {old_id} cannot be swapped with itself")
        old_alias, new_alias = ALIAS_PREFIX + old_id, ALIAS_PREFIX + new_id
        protocol = get_driver(new.get("driver_volume_type")).brick_protocol_for(
            self._render_options())
        timeout = self.detach_timeout if timeout is None else timeout
        with contextlib.ExitStack() as locks:
            for vid in sorted((old_id, new_id)):
                locks.enter_context(volume_lock(self.lock_dir, vid))
            states = self._host_state()
            state = self._find(states, instance)
            dom = state.dom
            mine = sorted((u for u in state.disks if u.alias == old_alias), key=lambda u: not u.live)
            if not mine:
                raise NotAttached(f"volume {old_id} is not attached to {state.name}")
            old_disk = mine[0].disk
            writers = sorted({u.domain_name for s in states for u in s.disks
                              if u.alias == old_alias and u.domain_uuid != state.uuid
                              and not u.disk.readonly})
            if old_disk.shareable and writers:
                raise VolumeInUse(f"volume {old_id} is shared and attached read-write to "
                                  f"{', '.join(writers)}; swapping {state.name} away from it would "
                                  "lose their writes")
            host = [u for s in states for u in s.disks]
            new_users = [u for u in host if u.alias == new_alias]
            self._check_sharing(new_users, state, new_id, new.get("multiattach") is True)
            self._connect_host(new_id, protocol, new)
            try:
                new_disk = self._render_like(new, old_disk)
                if state.active:
                    copy_and_pivot(dom, self.connection.events, old_disk.target.dev,  # type: ignore[union-attr]
                                   new_disk.to_xml(), timeout)
                    device_alias = mine[0].device_alias or old_alias
                    set_note(dom, device_alias, new_id, source_token(new_disk), live=True,
                             persistent=state.persistent)
                else:
                    dom.detachDeviceFlags(old_disk.to_xml(), libvirt.VIR_DOMAIN_AFFECT_CONFIG)
                    dom.attachDeviceFlags(new_disk.to_xml(), libvirt.VIR_DOMAIN_AFFECT_CONFIG)
            except (VirtDriverError, libvirt.libvirtError) as exc:
                if not new_users:
                    self._disconnect_quietly(new_id)
                if isinstance(exc, VirtDriverError):
                    raise
                raise SwapFailed(f"swapping volume {old_id} for {new_id} on {state.name} failed",
                                 libvirt_message(exc)) from None
            if not self._users(old_alias):
                self._release(old_id)
            found = [a for a in self.list_attachments(state.uuid) if a.volumeId == new_id]
            return found[0]

    def _render_like(self, info: dict[str, Any], old: Disk) -> Disk:
        """The new volume's disk at the old disk's place, with the old attach mode."""
        target = old.target
        unit = int(old.address.unit) if (old.address is not None and old.address.unit
                                         and old.address.type == "drive") else None
        return build_disk(info, attach_mode="ro" if old.readonly else "rw",
                          target_dev=target.dev if target else "sda",  # type: ignore[arg-type]
                          bus=(target.bus if target else None) or "scsi",
                          device=old.device or "disk", scsi_unit=unit,
                          mount_base=self.mount_base, label_policy=self.label_policy,
                          shared_image_label=self.shared_image_label,
                          native_iscsi=self.native_iscsi, native_glusterfs=self.native_glusterfs)

    def extend_volume(self, instance: str, connection_info: Mapping[str, Any],
                      new_size: int) -> int:
        """Grow an attached volume: os-brick's extend where the connector has one, then tell
        QEMU (block resize). Returns the size the guest now sees, in bytes."""
        info = _copy_info(connection_info)
        vid = _required_volume_id(info)
        if isinstance(new_size, bool) or not isinstance(new_size, int) or new_size <= 0:
            raise ExtendRefused(f"new size {new_size!r} is not a positive number of bytes")
        alias = ALIAS_PREFIX + vid
        kind = get_driver(info.get("driver_volume_type"))
        protocol = kind.brick_protocol_for(self._render_options())
        refusal = kind.extend_refusal(self._render_options())
        if refusal is not None:
            raise ExtendRefused(f"volume {vid} cannot be extended while attached: {refusal}")
        with volume_lock(self.lock_dir, vid):
            dom = self.connection.domain(instance)
            uses = [u for u in self._domain_disks(dom) if u.alias == alias and u.live]
            if not uses:
                raise NotAttached(f"volume {vid} is not attached to a running {dom.name()}")
            target = uses[0].disk.target.dev  # type: ignore[union-attr]
            try:
                current = dom.blockInfo(target)[0]
            except libvirt.libvirtError as exc:
                raise HypervisorError(f"cannot read the size of {target}",
                                      libvirt_message(exc)) from None
            if new_size < current:
                raise ExtendRefused(f"volume {vid} is {current} bytes; shrinking it to {new_size} "
                                    "would destroy data")
            grown = None
            if protocol is not None:
                grown = brick.extend(protocol, dict(info["data"]), self.state_dir,
                                     **self._connector_options(protocol))
            source = uses[0].disk.source
            if grown is None and source is not None and source.file:
                grown = _file_size(source.file)  # a file on a share: QEMU would grow it itself
            if grown is not None and grown < new_size:
                raise ExtendRefused(f"the host sees volume {vid} at {grown} bytes, less than "
                                    f"{new_size}: extend it on the storage side first")
            try:
                dom.blockResize(target, new_size, libvirt.VIR_DOMAIN_BLOCK_RESIZE_BYTES)
                return int(dom.blockInfo(target)[0])
            except libvirt.libvirtError as exc:
                raise HypervisorError(f"QEMU refused to resize {target} of {dom.name()}",
                                      libvirt_message(exc)) from None

    def _find_listed(self, listed: list[ListedDomain], instance: str) -> ListedDomain:
        found = next((d for d in listed if d.is_instance(instance)), None)
        if found is not None:
            return found
        dom = self.connection.domain(instance)  # defined meanwhile, or InstanceNotFound
        return ListedDomain(dom, dom.name(), dom.UUIDString(), bool(dom.isActive()),
                            bool(dom.isPersistent()))

    def _find(self, states: list[DomainState], instance: str) -> DomainState:
        found = next((s for s in states if s.is_instance(instance)), None)
        return found if found is not None else self._state(self.connection.domain(instance))

    # ---- detach -----------------------------------------------------------------------------

    def detach_volume(self, instance: str, volume_id: str, *, timeout: float | None = None,
                      connection_info: Mapping[str, Any] | None = None) -> None:
        """Detach one attachment; disconnect the host side when no local guest still uses it.

        Waits for libvirt's device-removed event (``timeout`` seconds, default the driver's
        ``detach_timeout``); :class:`DetachTimeout` leaves the attachment in place.
        """
        dom = self.connection.domain(instance)
        alias = ALIAS_PREFIX + volume_id
        timeout = self.detach_timeout if timeout is None else timeout
        with volume_lock(self.lock_dir, _lock_name(volume_id)):
            mine = [u for u in self._domain_disks(dom) if u.alias == alias]
            if not mine:
                raise NotAttached(f"volume {volume_id} is not attached to {dom.name()}")
            for use in sorted(mine, key=lambda u: not u.live):  # live first, then the definition
                device_alias = use.device_alias or alias
                if use.live:
                    self._detach_live(dom, use.disk, device_alias, timeout)
                else:
                    try:
                        dom.detachDeviceFlags(use.disk.to_xml(), libvirt.VIR_DOMAIN_AFFECT_CONFIG)
                    except libvirt.libvirtError as exc:
                        raise DetachFailed(f"cannot remove volume {volume_id} from the definition "
                                           f"of {dom.name()}", libvirt_message(exc)) from None
                if use.inherited_from is not None:
                    set_note(dom, device_alias, None, "", live=use.live, persistent=not use.live)
            if not self._users(alias):
                props = None
                if connection_info is not None:
                    props = dict(_copy_info(connection_info)["data"])
                self._release(volume_id, props)

    def _detach_live(self, dom: libvirt.virDomain, disk: Disk, alias: str,
                     timeout: float) -> None:
        removals = self.connection.events
        uuid = dom.UUIDString()
        removals.expect(uuid, alias)
        try:
            try:
                dom.detachDeviceFlags(disk.to_xml(), libvirt.VIR_DOMAIN_AFFECT_LIVE)
            except libvirt.libvirtError as exc:
                if exc.get_error_code() == libvirt.VIR_ERR_DEVICE_MISSING or not _running(dom):
                    return  # already gone (with the guest itself, if it was stopped meanwhile)
                if (MONITOR_CLOSED in libvirt_message(exc)
                        and removals.wait(uuid, alias, timeout) is not None):
                    return  # the guest was being destroyed: its stop event ended the wait
                raise DetachFailed(f"libvirt refused to detach {alias[3:]} from {dom.name()}",
                                   libvirt_message(exc)) from None
            result = removals.wait(uuid, alias, timeout)
        finally:
            removals.forget(uuid, alias)
        if result is False:
            raise DetachFailed(f"guest {dom.name()} refused to release volume {alias[3:]}")
        if result is None and _running(dom) and any(u.device_alias == alias and u.live
                                                    for u in self._domain_disks(dom)):
            raise DetachTimeout(f"guest {dom.name()} did not release volume {alias[3:]} within "
                                f"{timeout:g} s; it stays attached (retry the detach later)")

    # ---- helpers ----------------------------------------------------------------------------

    def _render_options(self) -> RenderOptions:
        return RenderOptions(mount_base=self.mount_base, native_iscsi=self.native_iscsi,
                             native_glusterfs=self.native_glusterfs)

    def _connector_options(self, protocol: str) -> dict[str, Any]:
        if protocol in REMOTEFS_PROTOCOLS:
            return {f"{protocol.lower()}_mount_point_base": self.mount_base}
        return {}

    def _connect_host(self, vid: str, protocol: str | None, info: dict[str, Any]) -> None:
        """Set up what the host needs for the volume: os-brick's connection (filling in
        ``device_path``), and for QEMU's own iSCSI initiator the CHAP secret in libvirt."""
        data = info["data"]
        if protocol is not None:
            device_info = self.host.connect(vid, protocol, dict(data),
                                            **self._connector_options(protocol))
            if device_info.get("path"):
                data["device_path"] = device_info["path"]
        if (self.native_iscsi and info.get("driver_volume_type") == "iscsi"
                and iscsi.uses_chap(data)):
            password = data.get("auth_password")
            if not isinstance(password, str) or not password:
                raise InvalidConnectionInfo("connection_info.data.auth_password",
                                            "is missing for CHAP")
            usage = iscsi.chap_secret_usage(str(data.get("target_iqn")), iscsi.lun_number(data))
            self.host.add_secret(self.connection.get(), vid, "iscsi", usage, password.encode())

    def _release(self, vid: str, properties: dict[str, Any] | None = None) -> None:
        """Release the volume's host side (the caller checked that no guest uses it)."""
        self.host.release(vid, self.connection.get(), self._mount_in_use, properties)

    def _mount_in_use(self, mount_point: str) -> bool:
        prefix = mount_point.rstrip("/") + "/"
        return any(u.disk.source is not None and (u.disk.source.file or "").startswith(prefix)
                   for state in self._host_state() for u in state.disks)

    def _users(self, alias: str) -> list[DiskUse]:
        volume = alias[len(ALIAS_PREFIX):]
        return [u for state in self._host_state(mentioning=volume) for u in state.disks
                if u.alias == alias]

    def _host_state(self, mentioning: str | None = None) -> list[DomainState]:
        try:
            return host_state(self.connection.get(), mentioning)
        except libvirt.libvirtError as exc:
            raise HypervisorError("cannot read the host's guests", libvirt_message(exc)) from None

    def _state(self, dom: libvirt.virDomain) -> DomainState:
        try:
            return DomainState.read(dom)
        except libvirt.libvirtError as exc:
            raise HypervisorError(f"cannot read guest {dom.name()}", libvirt_message(exc)) from None

    def _domain_disks(self, dom: libvirt.virDomain) -> list[DiskUse]:
        return self._state(dom).disks

    def _disconnect_quietly(self, vid: str) -> None:
        try:
            self._release(vid)
        except VirtDriverError as exc:
            LOG.error("could not release the host connection of %s: %s", vid, exc)

    def close(self) -> None:
        self.connection.close()


def _exists(dom: libvirt.virDomain) -> bool:
    """False once libvirt no longer knows the domain (a transient guest that was destroyed)."""
    try:
        dom.info()
    except libvirt.libvirtError as exc:
        return exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN
    return True


def _running(dom: libvirt.virDomain) -> bool:
    """Whether the guest still runs; a guest that is gone or shut off has no live devices."""
    try:
        return bool(dom.isActive())
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            return False
        raise HypervisorError(f"cannot read guest {dom.name()}", libvirt_message(exc)) from None


def _file_size(path: str) -> int | None:
    """The size of a volume's file as this host sees it (``None``: not visible here)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def _copy_info(connection_info: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(connection_info, Mapping):
        raise InvalidConnectionInfo("connection_info", "is not a JSON object")
    check_nesting(connection_info)  # before deepcopy could exhaust the interpreter's stack
    info = copy.deepcopy(dict(connection_info))
    if not isinstance(info.get("data"), Mapping):
        raise InvalidConnectionInfo("connection_info.data", "is missing or not a JSON object")
    info["data"] = dict(info["data"])
    return info


def _required_volume_id(info: Mapping[str, Any]) -> str:
    vid = volume_id(info)
    if vid is None:
        raise InvalidConnectionInfo("connection_info.data.volume_id",
                                    "is missing (neither volume_id nor serial identifies the "
                                    "volume, so its attachments could not be found again)")
    return vid


def _lock_name(vid: str) -> str:
    if not vid or "/" in vid or vid.startswith("."):
        raise NotAttached(f"{vid!r} is not a volume id")
    return vid
