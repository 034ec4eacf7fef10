"""A KVM host without a compute service, talking to Cinder itself (``--cinder``): what the brick
Cinder client extension does for bare metal, done for libvirt guests.

attach: this host's connector → ``POST /attachments`` (the volume's ``attach_mode``) → attach the
returned record → ``os-complete``; any failure deletes the attachment again (and detaches the
guest when only the completion failed). The attachment id and Cinder's URL are kept in the
guest's own ``<metadata>`` (live and persistent), so that a later detach, by any process, deletes
that attachment in Cinder once the guest let go.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import libvirt
from lxml import etree

from virtdriver.attachment import Attachment
from virtdriver.cinder.client import Cinder
from virtdriver.errors import CinderError, HypervisorError, NotAttached, VirtDriverError
from virtdriver.hypervisor.connection import libvirt_message
from virtdriver.hypervisor.metadata import write_element

NS = "https://virtdriver.dev/xmlns/cinder/1"
PREFIX = "virtdriver-cinder"


def attach(driver: Any, cinder: Cinder, instance: str, volume_id: str,
           attach_mode: str | None, **placement: Any) -> Attachment:
    """Create the Cinder attachment, attach the volume, complete the attachment."""
    mode = attach_mode or "rw"
    volume = cinder.volume(volume_id)
    connector = driver.connector_properties(mode)
    elsewhere = writers_elsewhere(driver, cinder, volume, connector.get("host"))
    record = cinder.create_attachment(volume_id, connector, mode)
    att_id = record["attachment"]["id"]
    attached = None
    try:
        doc = {"attachment": dict(record["attachment"],
                                  multiattach=bool(volume.get("multiattach")))}
        attached = driver.attach_volume(doc, instance, attach_mode=attach_mode,
                                        writers_elsewhere=elsewhere, **placement)
        remember(driver, instance, volume_id, att_id, cinder.url)
        cinder.complete_attachment(att_id)
    except BaseException as exc:
        try:
            if attached is not None:
                driver.detach_volume(instance, volume_id)
                forget(driver, instance, volume_id)
            cinder.delete_attachment(att_id, missing_ok=True)
        except VirtDriverError as undo:  # say both: what failed, and what is left behind
            raise CinderError(f"{exc}; undoing it failed too, Cinder attachment {att_id} of "
                              f"volume {volume_id} may remain: {undo}") from None
        raise
    return attached


class Detached(NamedTuple):
    """What :func:`detach` did: the Cinder attachment it deleted, and whether the guest still
    had the disk (``False``: only Cinder's stale attachment was left, e.g. after a swap)."""

    attachment: str | None
    detached: bool


def writers_elsewhere(driver: Any, cinder: Cinder, volume: dict[str, Any],
                      here: str | None) -> list[str]:
    """The volume's attachments that Cinder has on other hosts than ``here`` and that may write,
    named for the filesystem guard (:func:`named_writers`)."""
    listed = [a for a in volume.get("attachments") or [] if a.get("host_name") != here]
    if not listed:
        return []
    detail = cinder.call("GET", f"/attachments/detail?volume_id={volume['id']}")
    modes = {a.get("id"): a.get("attach_mode") for a in detail.get("attachments") or []}
    mine: set[str] = set()
    if any(not a.get("host_name") for a in listed):
        mine = {att for dom in driver.compute_host.connection.get().listAllDomains(0)
                for att, _ in notes_of(dom).values()}
    return named_writers(listed, modes, here, mine)


def named_writers(attachments: list[dict[str, Any]], modes: dict[Any, Any], here: str | None,
                  mine: set[str]) -> list[str]:
    """Of a volume's ``attachments`` (Cinder's volume view), those on another host that are not
    ``ro`` (``modes``: attachment id to its ``attach_mode``; one not known may write). Cinder
    names an attachment's host to an administrator only: one it does not name counts unless it
    is ``mine`` (remembered by a guest of this host)."""
    return [f"attachment {a.get('attachment_id')} on "
            f"{a.get('host_name') or 'a host Cinder does not name'}"
            for a in attachments if a.get("host_name") != here
            and modes.get(a.get("attachment_id")) != "ro"
            and (a.get("host_name") or a.get("attachment_id") not in mine)]


def detach(driver: Any, instance: str, volume_id: str, cinder_url: str | None = None,
           **kwargs: Any) -> Detached:
    """Detach; then delete the Cinder attachment remembered for it (``attachment`` ``None``
    when the volume was not attached through ``--cinder``). A guest that no longer has the
    disk but whose note remains (a swap took it away) only has that attachment deleted."""
    from virtdriver.policy.identity import check_instance, check_requested_volume_id

    check_instance(instance)
    check_requested_volume_id(volume_id)  # bad input before the guest is looked up
    note = recall(driver, instance, volume_id)
    try:
        driver.detach_volume(instance, volume_id, **kwargs)
        detached = True
    except NotAttached:
        if note is None:
            raise
        detached = False
    if note is None:
        return Detached(None, detached)
    att_id, url = note
    try:
        Cinder(cinder_url or url).delete_attachment(att_id, missing_ok=True)  # gone: fine
    except VirtDriverError as exc:
        state = "detached from" if detached else "no longer attached to"
        raise CinderError(f"volume {volume_id} is {state} {instance}, but its Cinder "
                          f"attachment {att_id} remains: {exc}") from None
    forget(driver, instance, volume_id)
    return Detached(att_id, detached)


# ---- the guest's notes ----------------------------------------------------------------------

def _flags(dom: libvirt.virDomain) -> list[int]:
    flags = [libvirt.VIR_DOMAIN_AFFECT_LIVE] if dom.isActive() else []
    if dom.isPersistent():
        flags.append(libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    return flags


def _read(dom: libvirt.virDomain, flag: int) -> dict[str, tuple[str, str]]:
    try:
        raw = dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, NS, flag)
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN_METADATA:
            return {}
        raise
    root = etree.fromstring(raw)
    return {n.get("volume", ""): (n.get("id", ""), n.get("url", "")) for n in root
            if etree.QName(n).localname == "attachment"}


def _write(dom: libvirt.virDomain, notes: dict[str, tuple[str, str]], flag: int) -> None:
    write_element(dom, "cinder", NS, PREFIX, flag, [
        ("attachment", {"volume": volume, "id": att_id, "url": url})
        for volume, (att_id, url) in sorted(notes.items())])


def _change(driver: Any, instance: str, volume_id: str, value: tuple[str, str] | None) -> None:
    dom = driver.compute_host.connection.domain(instance)
    try:
        _change_notes(dom, volume_id, value)
    except libvirt.libvirtError as exc:
        raise HypervisorError(f"cannot keep the Cinder attachment of volume {volume_id} in "
                              f"guest {instance}'s metadata", libvirt_message(exc)) from None


def _change_notes(dom: libvirt.virDomain, volume_id: str,
                  value: tuple[str, str] | None) -> None:
    for flag in _flags(dom):
        notes = _read(dom, flag)
        if value is None and notes.pop(volume_id, None) is None:
            continue
        if value is not None:
            notes[volume_id] = value
        _write(dom, notes, flag)


def remember(driver: Any, instance: str, volume_id: str, att_id: str, url: str) -> None:
    _change(driver, instance, volume_id, (att_id, url))


def forget(driver: Any, instance: str, volume_id: str) -> None:
    _change(driver, instance, volume_id, None)


def recall(driver: Any, instance: str, volume_id: str) -> tuple[str, str] | None:
    """``(attachment id, Cinder URL)`` remembered for the guest's volume, or ``None``."""
    return notes_of(driver.compute_host.connection.domain(instance)).get(volume_id)


def attachments(driver: Any, instance: str) -> dict[str, tuple[str, str]]:
    """Every remembered ``{volume id: (attachment id, URL)}`` of a guest."""
    return notes_of(driver.compute_host.connection.domain(instance))


def notes_of(dom: libvirt.virDomain) -> dict[str, tuple[str, str]]:
    """``{volume id: (attachment id, URL)}`` remembered in a domain (live if it runs)."""
    try:
        flags = _flags(dom)
        return _read(dom, flags[0]) if flags else {}
    except libvirt.libvirtError as exc:
        raise HypervisorError("cannot read a guest's Cinder attachments from its metadata",
                              libvirt_message(exc)) from None
