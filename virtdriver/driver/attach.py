"""Attach as steps: read the host, ask the policy, connect, attach each guest, or undo it all.

Attaching one volume to one guest is attaching it to a list of one. Under the volume's lock and
its data's lock: read every guest once; refuse unsafe sharing (:mod:`virtdriver.policy.sharing`)
before anything changes; connect the host side once; attach each guest (in parallel, each under
its guest lock); and on any failure remove what reached a guest and release what this call
connected, so the host ends as it was.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import libvirt

from virtdriver import arguments
from virtdriver.attachment import Attachment
from virtdriver.config import Disk
from virtdriver.driver import shared_write
from virtdriver.driver.compute_host import ComputeHost
from virtdriver.driver.detach import undo_attach
from virtdriver.driver.request import VolumeRequest
from virtdriver.errors import (
    AttachFailed,
    AttachRolledBack,
    HypervisorError,
    InputError,
    InvalidAttachRequest,
    InvalidRenderOption,
    PolicyRefusal,
    VirtDriverError,
    WrongDevice,
)
from virtdriver.hypervisor.access import why_attach_refused
from virtdriver.hypervisor.connection import libvirt_message
from virtdriver.hypervisor.dataid import DataIdentity, data_identity, opened_disk, path_identity
from virtdriver.hypervisor.domains import DiskUse, DomainsView, DomainXml, ListedDomain
from virtdriver.hypervisor.locks import HeldLocks, guest_lock
from virtdriver.hypervisor.metadata import OVERRIDES_NS
from virtdriver.hypervisor.mounts import check_guest_sees
from virtdriver.hypervisor.targets import bus_for, pick_target
from virtdriver.hypervisor.volume_users import Wanted
from virtdriver.policy import check_hotplug_bus
from virtdriver.policy.attach import check_io_policies
from virtdriver.policy.identity import alias_for
from virtdriver.policy.sharing import refuse_attach, refuse_fan_out, refuse_moved_device, users_of
from virtdriver.render import build_disk
from virtdriver.secrets import redact, secret_values

Progress = Callable[[str, "Attachment | Exception"], None]


@dataclass(frozen=True)
class Placement:
    """Where one guest's disk goes: the device, bus and options the caller asked for."""

    mode: str
    target_dev: str | None = None
    bus: str | None = None
    device: str = "disk"
    luks_secret_uuid: str | None = None
    cache: str | None = None  # none or directsync; default: the attach policy's
    error_policy: str | None = None
    rerror_policy: str | None = None

    def __post_init__(self) -> None:
        for name in ("target_dev", "bus", "device", "luks_secret_uuid", "cache", "error_policy",
                     "rerror_policy"):
            arguments.text(getattr(self, name), name, InvalidRenderOption,
                           optional=name != "device")
        check_io_policies(self.cache, self.error_policy, self.rerror_policy)


@dataclass(frozen=True)
class Target:
    """A guest an attach goes to: its XML as read with the host, and when that read began."""

    domain: DomainXml
    read_at: int  # time.monotonic_ns()

    @property
    def name(self) -> str:
        return self.domain.listed.name

    @property
    def uuid(self) -> str:
        return self.domain.listed.uuid


def attach(host: ComputeHost, connection_info: Mapping[str, Any], instances: Sequence[str],
           placements: Sequence[Placement], *, progress: Progress | None = None,
           max_parallel: int = 16, allow_shared_write: bool = False,
           writers_elsewhere: Sequence[str] = ()) -> list[Attachment]:
    """Attach one volume to every guest in ``instances`` (all or nothing).

    ``allow_shared_write`` lets a second guest write a filesystem that is not a cluster one
    (:mod:`virtdriver.policy.filesystems`); the override is noted in the guests' metadata.
    ``writers_elsewhere`` names the volume's writers on other hosts, which count as writers.
    """
    asked_at = time.monotonic_ns()
    request = prepare(host, connection_info, instances)
    return attach_prepared(host, request, request.data_before_connect(), instances, placements,
                           asked_at=asked_at, progress=progress, max_parallel=max_parallel,
                           allow_shared_write=allow_shared_write,
                           writers_elsewhere=writers_elsewhere)


def attach_prepared(host: ComputeHost, request: VolumeRequest, known: DataIdentity | None,
                    instances: Sequence[str], placements: Sequence[Placement], *, asked_at: int,
                    progress: Progress | None = None, max_parallel: int = 16,
                    allow_shared_write: bool = False,
                    writers_elsewhere: Sequence[str] = ()) -> list[Attachment]:
    """:func:`attach` of a request :func:`prepare` made; ``known``: its data before the lock,
    ``asked_at``: ``time.monotonic_ns()`` when the caller asked."""
    with locked(host, request, known) as held:
        done = attach_locked(host, held, request, known, instances, placements,
                             asked_at=asked_at, progress=progress, max_parallel=max_parallel,
                             allow_shared_write=allow_shared_write,
                             writers_elsewhere=writers_elsewhere)
    return done.finish(progress)


def prepare(host: ComputeHost, connection_info: Mapping[str, Any],
            instances: Sequence[str]) -> VolumeRequest:
    """The request, checked as far as it can be before the volume's lock."""
    request = VolumeRequest.parse(connection_info, host.options.render_options())
    refuse_fan_out(request.vid, request.multiattach, list(instances))
    host.check_label_policy()
    return request


def locked(host: ComputeHost, request: VolumeRequest, known: DataIdentity | None) -> HeldLocks:
    """The volume's lock and the lock of its data as known before the connect (``known``,
    from :meth:`VolumeRequest.data_before_connect`: the checks under the lock use it too)."""
    return host.lock([request.vid], request.lock_data(known), "attach")


@dataclass
class Attached:
    """What an attach made, and the overrides to note once the locks are released."""

    results: list[Attachment]
    instances: Sequence[str]
    notes: list[tuple[ListedDomain, str, str | None]]  # None: drop an earlier disk's note

    def finish(self, progress: Progress | None) -> list[Attachment]:
        """Note each shared-write override in its guest, tell ``progress``, and return the
        attachments."""
        for listed, alias, overridden in self.notes:
            shared_write.note(listed, alias, overridden)
        if progress:
            for name, attachment in zip(self.instances, self.results):
                progress(name, attachment)
        return self.results


def attach_locked(host: ComputeHost, held: HeldLocks, request: VolumeRequest,
                  known: DataIdentity | None, instances: Sequence[str],
                  placements: Sequence[Placement], *, asked_at: int,
                  progress: Progress | None = None, max_parallel: int = 16,
                  allow_shared_write: bool = False,
                  writers_elsewhere: Sequence[str] = ()) -> Attached:
    """:func:`attach` once the caller holds :func:`locked` (``held``) for the same ``known``."""
    targets, view = _read_host(host, instances, read_from(held, known, asked_at))
    data = known if known is not None and known[0] != "key" else None
    uses = view.uses(request.vid, data)
    for target, placement in zip(targets, placements):
        if target.domain.listed.active:  # what libvirt cannot hot-plug, before any connect
            check_hotplug_bus(placement.bus, "bus")
        refuse_attach(request.vid, data, request.multiattach, target.uuid, target.name, uses)
    used_before = users_of(request.vid, data, uses)
    record = host.check_record(request.vid, view)  # the view: read under the same lock
    attaching = False  # the connect's own typed errors (HostConnectFailed, ...) pass unchanged
    per_guest: list[Attachment | Exception] = []  # each guest's outcome, once one failed
    aliases: dict[str, str] = {}  # guest uuid -> the alias its disk got
    asked_path = request.data.get("device_path")  # what ``known`` was found through
    try:
        host.connect(request, record)
        _refuse_moved_path(request, known, asked_path)
        overridden = shared_write.check(request, [t.name for t in targets],
                                        [p.mode for p in placements], used_before,
                                        allow_shared_write, writers_elsewhere)
        attaching = True
        results = _attach_all(host, request, targets, placements, view, max_parallel,
                              per_guest, aliases)
    except VirtDriverError as exc:
        host.drop_after_failure(request, used_before)
        _report_failure(progress, instances, per_guest or [exc] * len(instances))
        if isinstance(exc, (AttachFailed, InputError, PolicyRefusal)) or not attaching:
            raise  # bad input and refusals keep their kind (and exit code)
        raise AttachFailed(f"attaching volume {request.vid} failed",
                           redact(str(exc), secret_values(request.info))) from None
    except BaseException:
        host.drop_after_failure(request, used_before)
        raise
    finally:  # a later decision under these locks rests on a read begun after this attach
        held.changed()
    notes = [(target.domain.listed, aliases[target.uuid],
              overridden if attachment.attach_mode == "rw" else None)
             for target, attachment in zip(targets, results)
             if (overridden and attachment.attach_mode == "rw")
             or OVERRIDES_NS in target.domain.current
             or OVERRIDES_NS in (target.domain.config or "")]
    return Attached(results, instances, notes)


def _refuse_moved_path(request: VolumeRequest, known: DataIdentity | None,
                       asked_path: object) -> None:
    """Refuse when the device path the data's lock was found through (``asked_path``, before
    the locks) leads to another device now: the locks and checks were for the first one."""
    path = request.data.get("device_path")
    if known is None or known[0] != "dev" or path != asked_path or not isinstance(path, str):
        return
    now = path_identity(path)
    if now != known:
        raise WrongDevice(f"volume {request.vid}: its device path {path} led to device "
                          f"{known[1]} when the attach was asked and leads to "
                          f"{os.path.realpath(path)} ({now[-1]}) now: the link moved; nothing "
                          "was attached")


def read_from(held: HeldLocks, known: DataIdentity | None, asked_at: int) -> int:
    """When the host's read for a decision under ``held`` may have begun, at the earliest.

    After the caller asked (it sees what virsh or nova did before), and after the last change
    made under its locks. The data lock covers every change to the data only when its identity
    is final (a device, a file, a network volume): others lock it by the identity found after
    their connect, which a protocol's key or a missing path is not. Then the read begins after
    the locks were taken, as it always did.
    """
    covered = known is not None and known[0] in ("dev", "inode", "net")
    return max(asked_at, held.settled_at if covered else held.taken_at)


def _read_host(host: ComputeHost, instances: Sequence[str],
               not_before: int) -> tuple[list[Target], DomainsView]:
    """The targets and every guest, read once; begun at or after ``not_before``
    (:func:`read_from`), so shared by the attaches of a storm."""
    try:
        uuids = _target_uuids(host, instances)
    except libvirt.libvirtError as exc:
        raise HypervisorError("cannot read the host's guests", libvirt_message(exc)) from None
    if len(set(uuids)) != len(uuids):
        raise InvalidAttachRequest("the same guest is named twice (by name and by UUID)")
    read_at, view = host.shared_view(not_before)
    by_uuid = {d.listed.uuid: d for d in view.domains}
    targets = []
    for instance, uuid in zip(instances, uuids):
        if uuid not in by_uuid:  # vanished between the lookup and the read
            host.connection.domain(instance)  # raises InstanceNotFound
            raise HypervisorError(f"guest {instance!r} changed while it was being read")
        targets.append(Target(by_uuid[uuid], read_at))
    return targets, view


def _target_uuids(host: ComputeHost, instances: Sequence[str]) -> list[str]:
    """Each target's UUID: one lookup for one guest, one listing of the host for many
    (:class:`InstanceNotFound` for a guest that is not here)."""
    if len(instances) == 1:
        return [host.connection.domain(instances[0]).UUIDString()]
    listed = host.connection.list_domains()
    return [next((d.uuid for d in listed if d.is_instance(instance)), None)
            or host.connection.domain(instance).UUIDString()  # defined meanwhile, or not here
            for instance in instances]


def _attach_all(host: ComputeHost, request: VolumeRequest, targets: list[Target],
                placements: Sequence[Placement], view: DomainsView, max_parallel: int,
                per_guest: list[Attachment | Exception],
                aliases: dict[str, str]) -> list[Attachment]:
    """Attach every guest in parallel; if one fails, undo them all and fill ``per_guest`` with
    what became of each (its own failure, or :class:`AttachRolledBack`). ``aliases`` is
    filled with the alias each guest's disk got."""
    outcomes: list[Attachment | BaseException] = []
    if len(targets) == 1:  # in this thread: a pool's thread start and hand-overs cost ~1 ms
        try:
            outcomes.append(_attach_guest(host, request, targets[0], placements[0], view,
                                          aliases))
        except BaseException as exc:  # noqa: BLE001 - undone below
            outcomes.append(exc)
    else:
        workers = max(1, min(max_parallel, len(targets)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(_attach_guest, host, request, target, placement, view,
                                   aliases) for target, placement in zip(targets, placements)]
            for future in futures:
                try:
                    outcomes.append(future.result())
                except BaseException as exc:  # noqa: BLE001 - every failure is undone below
                    outcomes.append(exc)
    failures = [(t, o) for t, o in zip(targets, outcomes) if isinstance(o, BaseException)]
    if not failures:
        return outcomes  # type: ignore[return-value]
    undone = {t.uuid: undo_attach(host, t.domain.listed.dom, aliases[t.uuid])
              for t in targets if t.uuid in aliases}
    target, failure = failures[0]
    if not isinstance(failure, VirtDriverError):
        raise failure
    per_guest += [_outcome(t, o, undone.get(t.uuid, True), target.name)
                  for t, o in zip(targets, outcomes)]
    if len(targets) == 1:
        raise failure
    made = len(targets) - len(failures)
    raise AttachFailed(f"attaching volume {request.vid} to {len(targets)} guests failed at "
                       f"{target.name} ({failure}); the {made} "
                       f"attachment{'s' if made != 1 else ''} made were undone") from None


def _attach_guest(host: ComputeHost, request: VolumeRequest, target: Target, placement: Placement,
                  view: DomainsView, aliases: dict[str, str]) -> Attachment:
    # Volume locks do not stop two volumes being attached to one guest at once: choosing a free
    # target and attaching are serialized per guest. The disks read with the host are still
    # current unless the guest's lock changed hands after that read began.
    with guest_lock(host.options.lock_dir, target.uuid, timeout=host.options.lock_timeout,
                    notice_after=host.options.lock_notice_after) as guest:
        domain = target.domain
        if guest.settled_at >= target.read_at:
            try:
                domain = domain.listed.read()
            except libvirt.libvirtError as exc:
                raise HypervisorError(f"cannot read guest {target.name}",
                                      libvirt_message(exc)) from None
        listed, layout = domain.listed, domain.placement
        has_scsi = any(kind == "scsi" for kind, _ in layout.controllers)
        bus = placement.bus or bus_for(placement.target_dev, has_scsi)
        dev, unit = pick_target(layout.disks, bus, placement.target_dev, listed.name,
                                layout.other_drive_units)
        taken = {d.alias.name for d in layout.disks if d.alias is not None and d.alias.name}
        alias = alias_for(request.vid, taken)
        disk = build_disk(request.info, attach_mode=placement.mode, target_dev=dev, bus=bus,
                          device=placement.device, scsi_unit=unit,
                          luks_secret_uuid=placement.luks_secret_uuid, alias=alias,
                          cache=placement.cache, error_policy=placement.error_policy,
                          rerror_policy=placement.rerror_policy, **host.render_kwargs())
        opened = opened_disk(disk) if listed.active else disk  # the device a link leads to
        data = data_identity(opened)
        # This guest's disks as read now (it may have been read again), the others' from the
        # host's read; each parsed only if it can hold the volume or its data.
        wanted = Wanted(request.vid, data)
        here = wanted.uses(domain.parsed.uses()) if domain.may_use(wanted) else []
        others = [u for u in view.uses(request.vid, data) if u.guest_uuid != listed.uuid]
        refuse_attach(request.vid, data, request.multiattach, listed.uuid, listed.name,
                      others + here)
        refuse_moved_device(request.vid, data, others)
        if listed.active and disk.source is not None and disk.source.file:
            check_guest_sees(listed.uuid, listed.name, disk.source.file,
                             str(host.options.mount_base))
        aliases[listed.uuid] = alias
        try:
            _attach_device(listed, disk, opened)
        except libvirt.libvirtError as exc:
            raise AttachFailed(f"libvirt refused to attach volume {request.vid} to "
                               f"{listed.name}", why_attach_refused(
                                   listed.dom, opened, libvirt_message(exc), request.info,
                                   host.options.label_policy)) from None
        if listed.active and disk.readonly and disk.type in ("block", "file"):
            host.after_readonly_hotplug(listed.dom, listed.name, listed.uuid)
    attachment = Attachment.from_use(DiskUse(listed.name, listed.uuid, listed.active,
                                             listed.active, opened), volume=request.vid)
    assert attachment is not None  # the disk was rendered with its alias and target
    return attachment


def _attach_device(listed: ListedDomain, disk: Disk, opened: Disk) -> None:
    """Attach ``opened`` to the running guest and ``disk`` to its definition: a restart opens
    what a link names then, the running guest keeps the device it opened (one call when the
    two are the same)."""
    live = libvirt.VIR_DOMAIN_AFFECT_LIVE if listed.active else 0
    config = libvirt.VIR_DOMAIN_AFFECT_CONFIG if listed.persistent else 0
    if opened is disk or not live or not config:
        listed.dom.attachDeviceFlags(opened.to_xml(), live | config)
        return
    listed.dom.attachDeviceFlags(opened.to_xml(), live)
    listed.dom.attachDeviceFlags(disk.to_xml(), config)  # a failure is undone by the alias


def _outcome(target: Target, outcome: Attachment | BaseException, undone: bool,
             failed_at: str) -> Attachment | Exception:
    """What became of one guest of an attach that failed (at ``failed_at``)."""
    if isinstance(outcome, Exception):
        return outcome
    if undone:
        return AttachRolledBack(f"{target.name} took the disk; rolled back because the attach "
                                f"failed at {failed_at}")
    return AttachFailed(f"{target.name} took the disk, and removing it again failed (see the "
                        "log); 'virtdriver list' shows whether it is still there")


def _report_failure(progress: Progress | None, instances: Sequence[str],
                    outcomes: Sequence[Attachment | Exception]) -> None:
    if progress:
        for name, outcome in zip(instances, outcomes):
            progress(name, outcome)
