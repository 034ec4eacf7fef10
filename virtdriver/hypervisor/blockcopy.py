"""Moving a live guest disk to another volume: block copy, wait for the mirror, pivot."""

from __future__ import annotations

import time
from collections.abc import Callable

import libvirt

from virtdriver.errors import SwapFailed, SwapTimeout
from virtdriver.hypervisor.connection import libvirt_message
from virtdriver.hypervisor.events import DomainEvents

COPY_FLAGS = libvirt.VIR_DOMAIN_BLOCK_COPY_REUSE_EXT | libvirt.VIR_DOMAIN_BLOCK_COPY_TRANSIENT_JOB
#: How often a waiting copy reads libvirt's job information for its ``progress`` callback (s).
PROGRESS_INTERVAL = 0.25

STATUS = {libvirt.VIR_DOMAIN_BLOCK_JOB_COMPLETED: "completed",
          libvirt.VIR_DOMAIN_BLOCK_JOB_FAILED: "failed",
          libvirt.VIR_DOMAIN_BLOCK_JOB_CANCELED: "cancelled",
          libvirt.VIR_DOMAIN_BLOCK_JOB_READY: "ready"}


def copy_and_pivot(dom: libvirt.virDomain, events: DomainEvents, target_dev: str,
                   destination_xml: str, timeout: float,
                   progress: Callable[[int, int], None] | None = None) -> None:
    """Mirror ``target_dev`` onto the (already existing) destination, then switch to it.

    Waits for libvirt's BLOCK_JOB_2 ``ready`` event; on any failure the job is cancelled and the
    guest keeps its current disk. ``TRANSIENT_JOB`` lets libvirt copy persistent guests too.
    ``progress(copied, total)`` (bytes, from libvirt's block job information) is called while
    the copy runs; whatever it raises (an operator's interrupt) cancels the copy the same way.
    """
    uuid = dom.UUIDString()
    events.expect_job(uuid, target_dev)
    try:
        try:
            dom.blockCopy(target_dev, destination_xml, None, COPY_FLAGS)
        except libvirt.libvirtError as exc:
            raise SwapFailed(f"libvirt refused to copy {target_dev} of {dom.name()}",
                             libvirt_message(exc)) from None
        try:
            status = _wait_ready(dom, events, target_dev, timeout, progress)
        except BaseException:
            _cancel(dom, target_dev)  # synchronous: the mirror is gone when it returns
            raise
        if status is None:
            _cancel(dom, target_dev)
            raise SwapTimeout(f"copying {target_dev} of {dom.name()} to the new volume did not "
                              f"get ready within {timeout:g} s; the copy was cancelled")
        if status != libvirt.VIR_DOMAIN_BLOCK_JOB_READY:
            _cancel(dom, target_dev)
            raise SwapFailed(f"copying {target_dev} of {dom.name()} to the new volume "
                             f"{STATUS.get(status, status)}")
        try:
            dom.blockJobAbort(target_dev, libvirt.VIR_DOMAIN_BLOCK_JOB_ABORT_PIVOT)
        except libvirt.libvirtError as exc:
            _cancel(dom, target_dev)
            raise SwapFailed(f"switching {target_dev} of {dom.name()} to the new volume failed",
                             libvirt_message(exc)) from None
    finally:
        events.forget_job(uuid, target_dev)


def _wait_ready(dom: libvirt.virDomain, events: DomainEvents, target_dev: str, timeout: float,
                progress: Callable[[int, int], None] | None) -> int | None:
    """The job's next status (``None`` when ``timeout`` ran out), reporting progress meanwhile."""
    uuid = dom.UUIDString()
    if progress is None:
        return events.wait_job(uuid, target_dev, timeout)
    deadline = time.monotonic() + timeout
    while True:
        left = max(deadline - time.monotonic(), 0.0)
        status = events.wait_job(uuid, target_dev, min(PROGRESS_INTERVAL, left))
        if status is not None or left <= 0:
            if status == libvirt.VIR_DOMAIN_BLOCK_JOB_READY:
                _report(dom, target_dev, progress)
            return status
        _report(dom, target_dev, progress)


def _report(dom: libvirt.virDomain, target_dev: str,
            progress: Callable[[int, int], None]) -> None:
    try:
        info = dom.blockJobInfo(target_dev, 0)
    except libvirt.libvirtError:
        info = {}
    if info and info.get("end"):
        progress(int(info["cur"]), int(info["end"]))
    else:
        progress(0, 0)  # nothing to show yet; the callback may still interrupt


def _cancel(dom: libvirt.virDomain, target_dev: str) -> None:
    try:
        dom.blockJobAbort(target_dev, 0)
    except libvirt.libvirtError:
        pass  # no job left to cancel
