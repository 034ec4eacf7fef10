"""Swap as steps (extend: :mod:`virtdriver.driver.extend`).

Swap moves a guest's disk from one volume to another keeping device and attach mode: under both
volumes' and both data's locks, the policy is asked first (:mod:`virtdriver.policy.swap`, and
:func:`refuse_attach` for the new volume on this guest), before and again after the new volume is
connected (its data and size known then). A
running guest is copied live (block copy, then pivot); the device keeps its alias, so a note in
the guest's metadata records that it now serves the new volume. A new volume named through a
link is copied to the device the link leads to, and the definition keeps the link. A shut-off
guest gets the new disk, under its own alias, in place of the old one in its definition -- and
the old one back if libvirt refuses the new. On any failure the guest keeps the old volume and
what was connected for the new one is released.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import libvirt

from virtdriver.attachment import Attachment
from virtdriver.config import Disk
from virtdriver.driver.compute_host import LOG, ComputeHost
from virtdriver.driver.detach import not_attached_message
from virtdriver.driver.request import VolumeRequest
from virtdriver.errors import (
    NotAttached,
    SwapFailed,
    VirtDriverError,
)
from virtdriver.hypervisor.blockcopy import copy_and_pivot
from virtdriver.hypervisor.connection import libvirt_message
from virtdriver.hypervisor.dataid import data_identity, host_size, identity_token, opened_disk
from virtdriver.hypervisor.domains import source_token
from virtdriver.hypervisor.metadata import set_note
from virtdriver.policy.attach import label_policy_of
from virtdriver.policy.identity import alias_for
from virtdriver.policy.sharing import DIRECT_CACHE_MODES, Use, refuse_attach, users_of
from virtdriver.policy.swap import (
    refuse_mode_change,
    refuse_size,
    refuse_swap,
    refuse_swap_target,
)
from virtdriver.render import build_disk


def swap(host: ComputeHost, instance: str, old_info: Mapping[str, Any],
         new_info: Mapping[str, Any], timeout: float,
         progress: Callable[[int, int], None] | None = None) -> Attachment:
    options = host.options.render_options()
    old, new = VolumeRequest.parse(old_info, options), VolumeRequest.parse(new_info, options)
    state = host.find(instance)
    mine = sorted((u for u in state.disks if u.volume == old.vid), key=lambda u: not u.live)
    if not mine:
        raise NotAttached(not_attached_message(old.vid, state))
    old_data = mine[0].data
    known = new.data_before_connect()
    data = new.lock_data(known)
    if old_data:  # (the same data under both ids is one lock: refused below, not waited for)
        data.append((identity_token(old_data), f"volume {old.vid}"))
    with host.lock([old.vid, new.vid], data, "swap"):
        state = host.find(instance)  # again, under the locks
        mine = sorted((u for u in state.disks if u.volume == old.vid), key=lambda u: not u.live)
        if not mine:
            raise NotAttached(not_attached_message(old.vid, state))
        uses = host.uses()
        old_disk = mine[0].disk
        new_known = known if known is not None and known[0] != "key" else None
        _refuse(new, old.vid, new_known, old_disk, state.uuid, state.name, uses)
        taken = {u.device_alias for u in state.disks if u.device_alias}
        alias = alias_for(new.vid, taken)
        _render_like(host, new, old_disk, alias)  # its refusals before anything is connected
        used_before = users_of(new.vid, new_known, uses)
        try:
            host.connect(new)
            new_disk = _render_like(host, new, old_disk, alias)
            _refuse(new, old.vid, data_identity(new_disk), old_disk, state.uuid, state.name,
                    uses)
            if state.active:
                refuse_size(old.vid, _guest_size(state.dom, old_disk), new.vid,
                            host_size(new_disk))
                _swap_live(host, state.dom, mine[0], new, new_disk, state.persistent, timeout,
                           progress)
            else:
                _swap_definition(state.dom, old_disk, new_disk)
        except BaseException as exc:
            host.drop_after_failure(new, used_before)
            if isinstance(exc, libvirt.libvirtError):
                raise SwapFailed(f"swapping volume {old.vid} for {new.vid} on {state.name} "
                                 "failed", libvirt_message(exc)) from None
            raise
        try:
            host.release_unless_used(old.vid, old_data)
        except VirtDriverError as exc:
            LOG.error("volume %s was swapped out of %s, but its host connection could not be "
                      "released (%s)", old.vid, state.name, exc)
    found = [a for a in (Attachment.from_use(u) for u in host.state(state.dom).disks)
             if a is not None and a.volumeId == new.vid]
    return found[0]


def _refuse(new: VolumeRequest, old: str, data: Any, old_disk: Disk, guest_uuid: str,
            guest: str, uses: list[Use]) -> None:
    """Every rule a swap onto ``new`` must pass: the swap's own, then attach's."""
    refuse_swap(old, new.vid, guest_uuid, guest, uses)
    refuse_mode_change(new.vid, new.mode, old_disk.readonly, guest)
    refuse_swap_target(old, new.vid, data, guest_uuid, guest, uses)
    refuse_attach(new.vid, data, new.multiattach, guest_uuid, guest, uses)


def _guest_size(dom: libvirt.virDomain, disk: Disk) -> int | None:
    """The size the guest's QEMU gives the disk now (what the copy reads), if it tells."""
    try:
        return int(dom.blockInfo(disk.target.dev)[0])  # type: ignore[union-attr]
    except (libvirt.libvirtError, AttributeError):
        return None


def _swap_live(host: ComputeHost, dom: libvirt.virDomain, old_use: Any, new: VolumeRequest,
               new_disk: Disk, persistent: bool, timeout: float,
               progress: Callable[[int, int], None] | None) -> None:
    opened = opened_disk(new_disk)  # the running guest names the device a link leads to
    copy_and_pivot(dom, host.connection.events, old_use.disk.target.dev, opened.to_xml(),
                   timeout, progress)
    set_note(dom, old_use.device_alias or "", new.vid, source_token(opened), live=True,
             persistent=persistent and opened is new_disk)
    if persistent and opened is not new_disk:
        _link_in_definition(dom, opened, new_disk)


def _link_in_definition(dom: libvirt.virDomain, opened: Disk, new_disk: Disk) -> None:
    """Give the definition the link back where the pivot wrote the device it led to (a restart
    opens what the link names then); the guest runs on the new volume whatever happens here."""
    flags = libvirt.VIR_DOMAIN_AFFECT_CONFIG
    try:
        dom.detachDeviceFlags(opened.to_xml(), flags)
    except libvirt.libvirtError as exc:
        LOG.warning("%s: the definition names %s, not the link %s: %s", dom.name(),
                    opened.source.dev if opened.source else "", new_disk.source.dev
                    if new_disk.source else "", libvirt_message(exc))
        return
    for disk in (new_disk, opened):  # the device again if libvirt refuses the link
        try:
            dom.attachDeviceFlags(disk.to_xml(), flags)
            return
        except libvirt.libvirtError as exc:
            LOG.error("%s: could not put the new volume's disk in the definition: %s",
                      dom.name(), libvirt_message(exc))


def _swap_definition(dom: libvirt.virDomain, old_disk: Disk, new_disk: Disk) -> None:
    flags = libvirt.VIR_DOMAIN_AFFECT_CONFIG
    dom.detachDeviceFlags(old_disk.to_xml(), flags)
    try:
        dom.attachDeviceFlags(new_disk.to_xml(), flags)
    except libvirt.libvirtError:
        dom.attachDeviceFlags(old_disk.to_xml(), flags)  # the guest keeps the old volume
        raise


def _render_like(host: ComputeHost, request: VolumeRequest, old: Disk, alias: str) -> Disk:
    """The new volume's disk at the old disk's place, with the old mode, labels and policies."""
    target = old.target
    unit = int(old.address.unit) if (old.address is not None and old.address.unit
                                     and old.address.type == "drive") else None
    kwargs = host.render_kwargs()
    policy, label = label_policy_of(old)  # the labels it was attached with, not this call's
    kwargs.update(label_policy=policy, shared_image_label=label)
    if policy != "auto":
        kwargs["security_models"] = host.security_models()
    driver = old.driver
    if driver is not None:  # the cache and error policies it was attached with
        kwargs.update(cache=driver.cache if driver.cache in DIRECT_CACHE_MODES else None,
                      error_policy=driver.error_policy, rerror_policy=driver.rerror_policy)
    return build_disk(request.info, attach_mode="ro" if old.readonly else "rw",
                      target_dev=target.dev if target and target.dev else "sda",
                      bus=(target.bus if target else None) or "scsi",
                      device=old.device or "disk", scsi_unit=unit, alias=alias, **kwargs)
