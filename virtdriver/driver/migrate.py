"""Live migration as steps on the two hosts, with the safety of attach and detach.

On the destination, :func:`prepare_incoming` connects a volume before the guest arrives (under the
volume's and its data's locks, refused by the sharing rules like an attach, rolled back on any
failure) and records the guest as *arriving*, so that the volume counts as used there until the
guest is; :func:`incoming_xml` rewrites the guest's ``<disk>`` elements for the destination
(source, secrets and labels of that host; attach mode, ``<shareable/>``, cache, alias, target and
address kept); :func:`abort_incoming` undoes a prepare when the migration failed. On the source,
:func:`finish_outgoing` releases the host side once the guest has left, unless another guest there
still uses the volume. :func:`migrate` drives all of it around libvirt's ``migrate3``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import libvirt
from lxml import etree

from virtdriver.config import Disk
from virtdriver.config.reader import parse_xml
from virtdriver.driver.host import Host
from virtdriver.driver.request import VolumeRequest
from virtdriver.errors import HostConnectFailed, MigrationFailed, MigrationRefused, VirtDriverError
from virtdriver.hypervisor.connection import libvirt_message
from virtdriver.hypervisor.dataid import data_identity
from virtdriver.hypervisor.hostconn import HostRecord
from virtdriver.hypervisor.jobwatch import watching
from virtdriver.hypervisor.usage import DomainState
from virtdriver.policy import check_attach_mode
from virtdriver.policy.identity import (
    alias_for,
    check_instance,
    check_requested_volume_id,
    volume_of_alias,
)
from virtdriver.policy.migration import Arrival, refuse_leaving, refuse_unprepared
from virtdriver.policy.sharing import refuse_attach, users_of
from virtdriver.render import build_disk

LOG = logging.getLogger("virtdriver.driver")


# ---- the destination ------------------------------------------------------------------------


def prepare_incoming(host: Host, connection_info: Mapping[str, Any], instance: str,
                     attach_mode: str) -> None:
    """Connect the volume on this (the destination) host for ``instance``, which will arrive by
    live migration; the guest counts as a user of the volume here from now on."""
    mode = check_attach_mode(attach_mode)
    check_instance(instance)
    request = VolumeRequest.parse(connection_info, host.options.render_options())
    if request.protocol is not None:
        probe = request.driver.host_probe()
        if probe is not None and not probe[0]:  # what doctor checks, before connecting anything
            raise HostConnectFailed(f"this host cannot open volume {request.vid} "
                                    f"({request.info.get('driver_volume_type')}): {probe[1]}")
    with host.lock([request.vid], request.lock_data(), "prepare an incoming migration"):
        states = host.states()
        if any(s.is_instance(instance) for s in states):
            raise MigrationRefused(f"guest {instance} is already on this host; it cannot arrive "
                                   "by migration")
        uses = [u for s in states for u in s.uses()]
        uses += host.arriving([(s.name, s.uuid) for s in states])
        uses = [u for u in uses if u.guest_uuid != instance]  # a repeated prepare replaces itself
        known = request.data_before_connect()
        data = known if known is not None and known[0] != "key" else None
        refuse_attach(request.vid, data, request.multiattach, instance, instance, uses)
        used_before = users_of(request.vid, data, uses)
        host.check_record(request.vid)
        try:
            host.connect(request)
            disk = build_disk(request.info, attach_mode=mode, alias=alias_for(request.vid, set()),
                              **host.render_kwargs())
            refuse_attach(request.vid, data_identity(disk), request.multiattach, instance,
                          instance, uses)
            _check_opens(request.vid, disk)
            arrival = Arrival(instance, request.vid, data_identity(disk), disk.shareable,
                              disk.readonly)
            record = host.records.load(request.vid) or HostRecord()
            record.arriving = [a for a in record.arriving if a.get("guest") != instance]
            record.arriving.append(arrival.to_json())
            host.records.save(request.vid, record)
        except BaseException:
            host.drop_after_failure(request, used_before)
            raise
    LOG.info("volume %s is connected for guest %s, arriving by live migration", request.vid,
             instance)


def abort_incoming(host: Host, instance: str, volume_id: str) -> bool:
    """Undo :func:`prepare_incoming` after a failed migration: forget the arrival and release
    the host side unless a guest here uses the volume. ``False`` when nothing was prepared."""
    check_requested_volume_id(volume_id)
    check_instance(instance)
    with host.lock([volume_id], [], "abort an incoming migration"):
        states = host.states()
        if any(s.is_instance(instance) for s in states if s.active):
            raise MigrationRefused(f"guest {instance} runs on this host: the migration did not "
                                   f"fail; detach volume {volume_id} instead")
        record = host.records.load(volume_id)
        mine = [a for a in (record.arriving if record else []) if a.get("guest") == instance]
        if record is None or not mine:
            return False
        record.arriving = [a for a in record.arriving if a.get("guest") != instance]
        host.records.save(volume_id, record)
        data = Arrival.from_json(mine[0]).data
        with host.data_locked(data, f"volume {volume_id}", "abort an incoming migration"):
            users = host.release_unless_used(volume_id, data)
    if users:
        LOG.info("volume %s stays connected on this host: still used by %s", volume_id,
                 ", ".join(users))
    return True


def incoming_xml(host: Host, domain_xml: str,
                 connection_infos: Sequence[Mapping[str, Any]]) -> str:
    """The guest's domain XML with each virtdriver disk rendered for this (the destination) host.

    Every volume the guest has must have been prepared here for it; the attach mode is the one
    prepared, and must be the one the guest has now.
    """
    root = parse_xml(domain_xml)  # the model's safe parser: no entities, no network
    guest = root.findtext("name") or "?"
    uuid = root.findtext("uuid") or ""
    requests = {}
    for info in connection_infos:
        request = VolumeRequest.parse(info, host.options.render_options())
        requests[request.vid] = request
    found = [(el, volume_of_alias(el.find("alias").get("name")))
             for el in root.iterfind("devices/disk") if el.find("alias") is not None]
    found = [(el, vid) for el, vid in found if vid is not None]
    refuse_unprepared(guest, [vid for _, vid in found], requests)
    for element, vid in found:
        disk = _rendered(host, requests[vid], Disk.from_element(element, strict=False), guest,
                         uuid)
        new = etree.fromstring(disk.to_xml().encode())
        new.tail = element.tail
        element.getparent().replace(element, new)
    return etree.tostring(root, encoding="unicode")


def _rendered(host: Host, request: VolumeRequest, old: Disk, guest: str, uuid: str) -> Disk:
    arrival = _arrival(host, request.vid, guest, uuid)
    mode = "ro" if arrival.readonly else "rw"
    if old.readonly != arrival.readonly:
        raise MigrationRefused(f"volume {request.vid} was prepared {mode} on the destination but "
                               f"guest {guest} has it {'ro' if old.readonly else 'rw'}")
    record = host.records.load(request.vid)
    if request.protocol is not None and record is not None and record.device_info.get("path"):
        request.data["device_path"] = record.device_info["path"]  # as this host connected it
    target = old.target
    unit = old.address.unit if old.address is not None and old.address.type == "drive" else None
    disk = build_disk(request.info, attach_mode=mode, target_dev=target.dev if target else "vdb",
                      bus=(target.bus if target and target.bus else "virtio"),
                      device=old.device or "disk",
                      scsi_unit=int(unit) if unit is not None else None,
                      alias=old.alias.name if old.alias else None,
                      **host.render_kwargs())
    return dataclasses.replace(disk, address=old.address, boot=old.boot,
                               encryption=old.encryption or disk.encryption)


def _arrival(host: Host, vid: str, guest: str, uuid: str) -> Arrival:
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


# ---- the source -----------------------------------------------------------------------------


def finish_outgoing(host: Host, instance: str, volume_id: str) -> list[str]:
    """After ``instance`` left this (the source) host: release the volume's host side unless
    another guest here uses it. Returns the guests that still do (then nothing is released)."""
    check_requested_volume_id(volume_id)
    with host.lock([volume_id], [], "finish an outgoing migration"):
        states = host.states()
        if any(s.is_instance(instance) and s.active for s in states):
            raise MigrationRefused(f"guest {instance} still runs on this host: the migration "
                                   "has not finished, so its volumes stay connected")
        gone = next((s.uuid for s in states if s.is_instance(instance)), None)
        data = next((u.data for s in states for u in s.disks if u.volume == volume_id), None)
        with host.data_locked(data, f"volume {volume_id}", "finish an outgoing migration"):
            users = host.release_unless_used(volume_id, data, gone=gone)
    if users:
        LOG.info("volume %s stays connected on this host: still used by %s", volume_id,
                 ", ".join(users))
    return users


def leaving_volumes(state: DomainState) -> dict[str, str]:
    """The volumes a guest takes along, with their attach modes; refused if one is unsafe."""
    live = [u for u in state.disks if u.live == state.active]
    refuse_leaving(state.name, [u.as_use() for u in live])
    return {u.volume: ("ro" if u.disk.readonly else "rw") for u in live if u.volume}


# ---- both -----------------------------------------------------------------------------------


def migrate(source: Host, destination: Host, instance: str,
            connection_infos: Sequence[Mapping[str, Any]], *, uri: str | None = None,
            flags: int = 0, progress: Callable[[int, int], None] | None = None) -> list[str]:
    """Live-migrate ``instance`` from ``source`` to ``destination`` with its volumes.

    ``connection_infos`` are the volumes' connection info *for the destination*. Returns the
    volumes whose host side the source kept (another guest there still uses them). A failure
    leaves both hosts as they were: the guest runs on the source, the destination released
    what was prepared. ``progress(processed, total)`` hears how far libvirt's migration is, in
    bytes (:func:`virtdriver.hypervisor.jobwatch.watching`); whatever it raises aborts it.
    """
    dom = source.connection.domain(instance)
    state = source.state(dom)
    if not state.active:
        raise MigrationRefused(f"guest {state.name} is not running; live migration moves running "
                               "guests")
    modes = leaving_volumes(state)
    requests = {VolumeRequest.parse(i, destination.options.render_options()).vid: i
                for i in connection_infos}
    refuse_unprepared(state.name, modes, requests)
    prepared: list[str] = []
    try:
        for vid, mode in modes.items():
            prepare_incoming(destination, requests[vid], state.uuid, mode)
            prepared.append(vid)
        params = _params(source, destination, dom, state, requests.values(), uri)
        flags |= libvirt.VIR_MIGRATE_LIVE
        if state.persistent:
            flags |= libvirt.VIR_MIGRATE_PERSIST_DEST | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE
        try:
            with watching(dom, progress):  # progress hook (#28)
                dom.migrate3(destination.connection.get(), params, flags)
        except libvirt.libvirtError as exc:
            raise MigrationFailed(f"libvirt could not migrate {state.name}; it still runs on the "
                                  "source", libvirt_message(exc)) from None
    except BaseException:
        for vid in prepared:
            try:
                abort_incoming(destination, state.uuid, vid)
            except VirtDriverError as exc:
                LOG.error("could not undo the preparation of volume %s on the destination: %s",
                          vid, exc)
        raise
    kept = []
    for vid in modes:  # the guest has moved: what is left to tidy up cannot undo that
        try:
            if finish_outgoing(source, state.uuid, vid):
                kept.append(vid)
            _forget_arrival(destination, state.uuid, vid)  # its own disks count there now
        except VirtDriverError as exc:
            LOG.error("guest %s was migrated, but volume %s could not be tidied up (%s); "
                      "'virtdriver audit' on each host shows what is left", state.name, vid, exc)
    return kept


def _params(source: Host, destination: Host, dom: libvirt.virDomain, state: DomainState,
            infos: Any, uri: str | None) -> dict[str, Any]:
    flags = libvirt.VIR_DOMAIN_XML_MIGRATABLE | libvirt.VIR_DOMAIN_XML_SECURE
    try:
        live = dom.XMLDesc(flags)
        persistent = dom.XMLDesc(flags | libvirt.VIR_DOMAIN_XML_INACTIVE) if state.persistent \
            else None
    except libvirt.libvirtError as exc:
        raise MigrationFailed(f"cannot read guest {state.name}", libvirt_message(exc)) from None
    infos = list(infos)
    params: dict[str, Any] = {libvirt.VIR_MIGRATE_PARAM_DEST_XML:
                              incoming_xml(destination, live, infos)}
    if persistent is not None:
        params[libvirt.VIR_MIGRATE_PARAM_PERSIST_XML] = incoming_xml(destination, persistent,
                                                                     infos)
    if uri:
        params[libvirt.VIR_MIGRATE_PARAM_URI] = uri
    return params


def _forget_arrival(host: Host, instance: str, volume_id: str) -> None:
    with host.lock([volume_id], [], "complete an incoming migration"):
        record = host.records.load(volume_id)
        if record is not None and any(a.get("guest") == instance for a in record.arriving):
            record.arriving = [a for a in record.arriving if a.get("guest") != instance]
            host.records.save(volume_id, record)
