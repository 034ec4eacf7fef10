"""``virtdriver doctor``: can this host attach volumes, and can it share them safely?

:func:`diagnose` runs the probes (:mod:`.probes` for libvirt, QEMU, labels, directories and
os-brick; :mod:`.initiators` for iscsid, multipathd, kernel modules; :mod:`.storage` for every
registered protocol and mount propagation; :mod:`.reservations` for SCSI persistent
reservations) and returns a
:class:`~.verdict.DoctorReport`; :func:`~.report.format_report` prints it for an operator.

Nothing on the host is left changed: os-brick is set up (its lock directory created), and the
propagation probe mounts a small tmpfs below the mount base for a moment and removes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from virtdriver.ops.doctor.initiators import initiator_checks
from virtdriver.ops.doctor.probes import (
    connector_check,
    directory_checks,
    hypervisor_checks,
    kvm_check,
    open_libvirt,
    security_driver_check,
    security_models,
    selinux_checks,
    selinux_mode,
)
from virtdriver.ops.doctor.report import format_report
from virtdriver.ops.doctor.reservations import reservations_check
from virtdriver.ops.doctor.storage import propagation_check, protocol_checks
from virtdriver.ops.doctor.verdict import STATUSES, Check, DoctorReport, Status
from virtdriver.selinux import image_contexts

if TYPE_CHECKING:
    from virtdriver.driver import LibvirtVolumeDriver

__all__ = ["STATUSES", "Check", "DoctorReport", "Status", "diagnose", "format_report",
           "image_contexts", "security_models", "selinux_mode"]


def diagnose(driver: LibvirtVolumeDriver) -> DoctorReport:
    """Every check, in the order an operator reads them (the hypervisor first)."""
    facts: dict[str, Any] = {}
    checks: list[Check] = []
    conn = open_libvirt(driver, checks)
    if conn is not None:
        checks += hypervisor_checks(driver, facts)
        checks.append(kvm_check(conn, facts))
        checks.append(security_driver_check(conn, facts))
    checks += selinux_checks(facts)
    checks += directory_checks(driver, facts)  # before os-brick creates the lock directory
    checks.append(propagation_check(driver.mount_base, facts))
    checks.append(connector_check(driver, facts))
    checks += initiator_checks(driver, facts)
    enabled = frozenset(flag for flag, on in (("--native-iscsi", driver.options.native_iscsi),
                                              ("--native-glusterfs",
                                               driver.options.native_glusterfs)) if on)
    checks += protocol_checks(facts, enabled)
    checks.append(reservations_check(facts, set(facts["qemu_block_drivers"])))
    return DoctorReport(driver.uri, checks, facts)
