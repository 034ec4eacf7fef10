"""Live migration on the destination: prepare a volume before the guest arrives, render the guest's
disks for this host, and complete (the guest is here) or abort (it will not come) afterwards.

:func:`prepare_incoming` connects a volume under the volume's and its data's locks, refused by the
sharing rules and the shared-write guard like an attach and rolled back on any failure, and notes
the guest as *arriving*: the volume counts as used here until the guest is. :func:`incoming_xml`
renders each of the guest's volumes for this host; the disk must arrive as it left
(:mod:`virtdriver.policy.carryover`), and a shared one uncached; in the live XML a disk named
through a link names the device it leads to, the definition keeps the link. The disk's
``--allow-shared-write`` note (the guest's, or one granted at the preparation) goes along,
written for the disk as rendered here, and is keyed to its new index on completion.
"""

from __future__ import annotations

import logging
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import libvirt
from lxml import etree

from virtdriver.config import Disk
from virtdriver.config.reader import parse_xml
from virtdriver.driver import shared_write
from virtdriver.driver.compute_host import ComputeHost
from virtdriver.driver.request import VolumeRequest
from virtdriver.errors import HostConnectFailed, InvalidRenderOption, MigrationRefused, show
from virtdriver.hypervisor.dataid import data_identity, opened_disk
from virtdriver.hypervisor.domains import DomainState, source_token
from virtdriver.hypervisor.hostconn import HostRecord
from virtdriver.hypervisor.metadata import Override, overrides_in, set_overrides_in
from virtdriver.policy import check_attach_mode
from virtdriver.policy.carryover import carried_over, refuse_changed
from virtdriver.policy.identity import (
    alias_for,
    check_instance,
    check_requested_volume_id,
    volume_of_alias,
)
from virtdriver.policy.migration import (
    ARRIVING,
    Arrival,
    refuse_arriving_over,
    refuse_cached_arrival,
    refuse_unprepared,
)
from virtdriver.policy.sharing import refuse_attach, users_of
from virtdriver.render import build_disk

LOG = logging.getLogger("virtdriver.driver")
#: Stands for a device path only the host connect will tell, where a disk is rendered to compare
#: its promises before anything is connected (the source is never compared).
NOT_CONNECTED = "/dev/virtdriver-not-connected-yet"


def prepare_incoming(host: ComputeHost, connection_info: Mapping[str, Any], instance: str,
                     attach_mode: str, *, allow_shared_write: bool = False) -> None:
    """Connect the volume on this (the destination) host for ``instance``, which will arrive by
    live migration; the guest counts as a user of the volume here from now on.

    Refused like an attach of the same guest: the sharing rules, and the shared-write guard
    (:mod:`virtdriver.driver.shared_write`; ``allow_shared_write`` is its override).
    """
    mode = check_attach_mode(attach_mode)
    check_instance(instance)
    request = VolumeRequest.parse(connection_info, host.options.render_options())
    if request.protocol is not None:
        probe = request.driver.host_probe()
        if probe is not None and not probe[0]:  # what doctor checks, before connecting anything
            raise HostConnectFailed(f"this host cannot open volume {request.vid} "
                                    f"({request.info.get('driver_volume_type')}): {probe[1]}")
    known = request.data_before_connect()
    with host.lock([request.vid], request.lock_data(known), "prepare an incoming migration"):
        states = host.states()
        here = [s for s in states if s.is_instance(instance)]
        if here:
            refuse_arriving_over(instance, any(s.active for s in here))
        uses = [u for s in states for u in s.uses()]
        uses += host.arriving([(s.name, s.uuid) for s in states])
        uses = [u for u in uses if u.guest_uuid != instance]  # a repeated prepare replaces itself
        data = known if known is not None and known[0] != "key" else None
        refuse_attach(request.vid, data, request.multiattach, instance, instance, uses)
        used_before = users_of(request.vid, data, uses)
        host.check_record(request.vid)
        try:
            host.connect(request)
            disk = build_disk(request.info, attach_mode=mode, alias=alias_for(request.vid, set()),
                              **host.render_kwargs())
            data_now = data_identity(disk)
            refuse_attach(request.vid, data_now, request.multiattach, instance, instance, uses)
            _check_opens(request.vid, disk)
            granted = shared_write.check(request, [f"{instance}{ARRIVING}"], [mode],
                                         users_of(request.vid, data_now, uses),
                                         allow_shared_write)
            arrival = Arrival(instance, request.vid, data_now, disk.shareable,
                              disk.readonly, uuidlib.uuid4().hex, granted)
            record = host.records.load(request.vid) or HostRecord()
            record.arriving = [a for a in record.arriving
                               if not Arrival.from_json(a).is_guest(instance, instance)]
            record.arriving.append(arrival.to_json())
            host.records.save(request.vid, record)
        except BaseException:
            host.drop_after_failure(request, used_before)
            raise
    LOG.info("volume %s is connected for guest %s, arriving by live migration", request.vid,
             instance)


def abort_incoming(host: ComputeHost, instance: str, volume_id: str) -> bool:
    """Undo :func:`prepare_incoming` after a failed migration (or once a guest that arrived has
    gone again): forget the arrival and release the host side unless a guest here uses the
    volume. ``False`` when nothing was prepared or left to release."""
    check_requested_volume_id(volume_id)
    check_instance(instance)
    with host.lock([volume_id], [], "abort an incoming migration"):
        states = host.states()
        here = [s for s in states if s.is_instance(instance) and s.active]
        now = libvirt_state(here[0]) if here else None  # None: gone since it was listed
        if now == (libvirt.VIR_DOMAIN_PAUSED, libvirt.VIR_DOMAIN_PAUSED_MIGRATION):
            raise MigrationRefused(f"guest {instance} is here, paused by an incoming migration "
                                   "that has not ended: once libvirt ends it (or after 'virsh "
                                   f"destroy {here[0].name}'), run migrate-abort again")
        if now is not None and now[0] == libvirt.VIR_DOMAIN_SHUTDOWN:
            raise MigrationRefused(f"guest {instance} is here, left by an incoming migration "
                                   "that has not ended, and libvirt shuts it down: once it is "
                                   f"gone (or after 'virsh destroy {here[0].name}'), run "
                                   "migrate-abort again")
        if now is not None:
            raise MigrationRefused(f"guest {instance} runs on this host: the migration did not "
                                   f"fail; detach volume {volume_id} instead")
        mine = host.forget_arrivals(volume_id, guest=instance)
        record = host.records.load(volume_id)
        if record is None:
            return bool(mine)
        data = mine[0].data if mine else None
        with host.data_locked(data, f"volume {volume_id}", "abort an incoming migration"):
            users = host.release_unless_used(volume_id, data)
    if users:
        LOG.info("volume %s stays connected on this host: still used by %s", volume_id,
                 ", ".join(users))
    return bool(mine) or not users


def libvirt_state(state: DomainState) -> tuple[int, int] | None:
    """The guest's state and reason as libvirt gives them now; ``None`` once it is gone."""
    try:
        now, reason = state.dom.state()
    except libvirt.libvirtError:
        return None
    return int(now), int(reason)


def incoming(state: DomainState) -> bool:
    """Whether the guest is still only the receiving end of a migration (paused for it)."""
    try:
        now, reason = state.dom.state()
    except libvirt.libvirtError:
        return False
    return bool(now == libvirt.VIR_DOMAIN_PAUSED and reason == libvirt.VIR_DOMAIN_PAUSED_MIGRATION)


def complete_incoming(host: ComputeHost, instance: str, volume_id: str) -> bool:
    """Once ``instance`` runs here: forget its arrival note (its own disk counts from now on),
    under the volume's lock and the lock of the note's data (:meth:`ComputeHost.forget_arrived`),
    and key the disk's override note, if any, to the index the disk got here.
    The step that ends a migration driven by the caller's own ``migrate3``. ``False`` when there
    was no note (already completed)."""
    check_requested_volume_id(volume_id)
    check_instance(instance)
    with host.lock([volume_id], [], "complete an incoming migration"):
        here = [s for s in host.states() if s.is_instance(instance) and s.active]
        if here and incoming(here[0]):
            raise MigrationRefused(f"guest {instance} has not arrived yet: its incoming "
                                   "migration has not ended")
        if not here:
            raise MigrationRefused(f"guest {instance} does not run on this host: it has not "
                                   "arrived; if its migration failed, undo the preparation with "
                                   f"'virtdriver migrate-abort {instance} {volume_id}'")
        shared_write.key_arrived(here[0], volume_id)
        return bool(host.forget_arrived(volume_id, guest=here[0])
                    + host.forget_arrived(volume_id, guest=instance))


def incoming_xml(host: ComputeHost, domain_xml: str,
                 connection_infos: Sequence[Mapping[str, Any]], *, live: bool = True) -> str:
    """The guest's domain XML with each virtdriver disk rendered for this (the destination) host.

    Every volume the guest has must have been prepared here for it; each disk must arrive as it
    left (attach mode, sharing, cache, ... see :mod:`virtdriver.policy.carryover`). ``live``
    (``VIR_MIGRATE_PARAM_DEST_XML``): a disk named through a link names the device it leads to
    now, as an attach's running guest does; ``live=False`` (``VIR_MIGRATE_PARAM_PERSIST_XML``)
    keeps the link for the definition.
    """
    root = parse_xml(domain_xml)  # the model's safe parser: no entities, no network
    guest = root.findtext("name") or "?"
    uuid = root.findtext("uuid") or ""
    requests = {}
    for info in connection_infos:
        request = VolumeRequest.parse(info, host.options.render_options())
        requests[request.vid] = request
    found = volume_disks(root)
    refuse_unprepared(guest, [vid for _, vid in found], requests)
    overrides = overrides_in(root)
    notes = dict(overrides)
    for element, vid in found:
        leaving = Disk.from_element(element, strict=False)
        arrival = _arrival(host, vid, guest, uuid)
        disk = arriving_disk(host, requests[vid], leaving, guest,
                             "ro" if arrival.readonly else "rw", connected=True)
        if live:
            disk = opened_disk(disk)  # a link that moves later cannot hide the device held
        new = etree.fromstring(disk.to_xml().encode())
        new.tail = element.tail
        element.getparent().replace(element, new)
        _carry_override(notes, vid, leaving, disk, arrival)
    if notes != overrides:
        set_overrides_in(root, notes)
    return etree.tostring(root, encoding="unicode")


def _carry_override(notes: dict[str, Override], vid: str, leaving: Disk, disk: Disk,
                    arrival: Arrival) -> None:
    """The override note of the arriving disk: the leaving disk's own (the migratable XML has
    no index to compare) or the one granted at the arrival, for the disk's source here; its
    index is the one the disk gets there (:func:`complete_incoming`)."""
    alias = (leaving.alias.name if leaving.alias is not None else None) or ""
    note = notes.pop(alias, None)
    if note is not None and not replace(note, index=None).belongs_to(vid, source_token(leaving),
                                                                     None):
        note = None
    filesystem = arrival.shared_write or (note.filesystem if note is not None else None)
    if filesystem and not disk.readonly:
        notes[alias] = Override(filesystem, vid, source_token(disk))


def volume_disks(root: etree._Element) -> list[tuple[etree._Element, str]]:
    """The ``<disk>`` elements of a domain that are virtdriver volumes, with their volume ids."""
    found = [(el, volume_of_alias(el.find("alias").get("name")))
             for el in root.iterfind("devices/disk") if el.find("alias") is not None]
    return [(el, vid) for el, vid in found if vid is not None]


def arriving_disk(host: ComputeHost, request: VolumeRequest, leaving: Disk, guest: str,
                  mode: str, *, connected: bool) -> Disk:
    """The disk as it would arrive here: rendered from this host's ``connection_info``, what is
    carried over taken from ``leaving``; refused when a promise would break. ``connected=False``
    renders before the host connect (to refuse before anything moves)."""
    info = dict(request.info, data=dict(request.data))
    record = host.records.load(request.vid) if connected else None
    if request.protocol is not None and record is not None and record.device_info.get("path"):
        info["data"]["device_path"] = record.device_info["path"]  # as this host connected it
    elif request.protocol is not None and not connected:
        info["data"].setdefault("device_path", NOT_CONNECTED)
    target = leaving.target
    bus = target.bus if target and target.bus else "virtio"
    unit = (leaving.address.unit if bus == "scsi" and leaving.address is not None
            and leaving.address.type == "drive" else None)
    dev = target.dev if target else "vdb"
    if dev is None:  # a <target> without dev: refused as build_disk refuses a bad device name
        raise InvalidRenderOption(f"target_dev: {show(dev)} is not a disk device name such as "
                                  "vdb or sdc")
    rendered = build_disk(info, attach_mode=mode, target_dev=dev,
                          bus=bus, device=leaving.device or "disk",
                          scsi_unit=int(unit) if unit is not None and unit.isdigit() else None,
                          alias=leaving.alias.name if leaving.alias else None,
                          **host.render_kwargs())
    disk = carried_over(leaving, rendered)
    refuse_changed(guest, request.vid, leaving, disk)
    refuse_cached_arrival(guest, request.vid, dev, disk.shareable,
                          disk.driver.cache if disk.driver is not None else None)
    return disk


def _arrival(host: ComputeHost, vid: str, guest: str, uuid: str) -> Arrival:
    record = host.records.load(vid)
    for raw in record.arriving if record else []:
        arrival = Arrival.from_json(raw)
        if arrival.is_guest(guest, uuid):
            return arrival
    refuse_unprepared(guest, [vid], [])
    raise AssertionError("unreachable")  # refuse_unprepared raised


def _check_opens(vid: str, disk: Disk) -> None:
    """The doctor-style check that the host connection really gives a path this host opens."""
    path = disk.source.dev or disk.source.file if disk.source is not None else None
    if not path:
        return  # a network disk: QEMU connects by itself
    try:
        with open(path, "rb") as opened:
            opened.read(0)
    except OSError as exc:
        raise HostConnectFailed(f"this host cannot open volume {vid} at {path}: "
                                f"{exc.strerror or exc}") from None
