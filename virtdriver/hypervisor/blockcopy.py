"""Moving a live guest disk to another volume: block copy, wait for the mirror, pivot."""

from __future__ import annotations

import libvirt

from virtdriver.errors import SwapFailed
from virtdriver.hypervisor.connection import libvirt_message
from virtdriver.hypervisor.events import DomainEvents

COPY_FLAGS = libvirt.VIR_DOMAIN_BLOCK_COPY_REUSE_EXT | libvirt.VIR_DOMAIN_BLOCK_COPY_TRANSIENT_JOB
STATUS = {libvirt.VIR_DOMAIN_BLOCK_JOB_COMPLETED: "completed",
          libvirt.VIR_DOMAIN_BLOCK_JOB_FAILED: "failed",
          libvirt.VIR_DOMAIN_BLOCK_JOB_CANCELED: "cancelled",
          libvirt.VIR_DOMAIN_BLOCK_JOB_READY: "ready"}


def copy_and_pivot(dom: libvirt.virDomain, events: DomainEvents, target_dev: str,
                   destination_xml: str, timeout: float) -> None:
    """Mirror ``target_dev`` onto the (already existing) destination, then switch to it.

    Waits for libvirt's BLOCK_JOB_2 ``ready`` event; on any failure the job is cancelled and the
    guest keeps its current disk. ``TRANSIENT_JOB`` lets libvirt copy persistent guests too.
    """
    uuid = dom.UUIDString()
    events.expect_job(uuid, target_dev)
    try:
        try:
            dom.blockCopy(target_dev, destination_xml, None, COPY_FLAGS)
        except libvirt.libvirtError as exc:
            raise SwapFailed(f"libvirt refused to copy {target_dev} of {dom.name()}",
                             libvirt_message(exc)) from None
        status = events.wait_job(uuid, target_dev, timeout)
        if status != libvirt.VIR_DOMAIN_BLOCK_JOB_READY:
            _cancel(dom, target_dev)
            what = "did not get ready in time" if status is None else STATUS.get(status, status)
            raise SwapFailed(f"copying {target_dev} of {dom.name()} to the new volume {what}")
        try:
            dom.blockJobAbort(target_dev, libvirt.VIR_DOMAIN_BLOCK_JOB_ABORT_PIVOT)
        except libvirt.libvirtError as exc:
            _cancel(dom, target_dev)
            raise SwapFailed(f"switching {target_dev} of {dom.name()} to the new volume failed",
                             libvirt_message(exc)) from None
    finally:
        events.forget_job(uuid, target_dev)


def _cancel(dom: libvirt.virDomain, target_dev: str) -> None:
    try:
        dom.blockJobAbort(target_dev, 0)
    except libvirt.libvirtError:
        pass  # no job left to cancel
