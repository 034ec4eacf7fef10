"""Operator commands of the ``virtdriver`` CLI: ``doctor``, ``audit`` and ``repair-labels``.

Registered by :func:`add_operator_commands` (listed in ``virtdriver.cli.commands.COMMANDS``).
doctor and audit exit 0 when all is well and 1 when something is wrong on the host (multiattach
cannot work; a volume is in danger), so they can gate a deployment or run from cron.
"""

from __future__ import annotations

import argparse
from typing import Any

from virtdriver.cli.attach import add_lock_timeout
from virtdriver.cli.streams import as_json, say
from virtdriver.formatting import table_lines  # noqa: F401 - used by the demo and doctor

EXIT_OK = 0
EXIT_PROBLEM = 1


def _doctor(args: argparse.Namespace) -> int:
    from virtdriver.driver import LibvirtVolumeDriver
    from virtdriver.ops.doctor import diagnose, format_report

    driver = LibvirtVolumeDriver(args.connect, state_dir=args.state_dir,
                                 mount_base=args.mount_base, native_iscsi=args.native_iscsi,
                                 native_glusterfs=args.native_glusterfs,
                                 use_multipath=args.multipath,
                                 enforce_multipath=args.enforce_multipath)
    try:
        report = diagnose(driver)
    finally:
        driver.close()
    return _shown(report, format_report, args.json, problem=not report.multiattach_ok)


def _audit(args: argparse.Namespace) -> int:
    from virtdriver.hypervisor.connection import Connection
    from virtdriver.ops.audit import audit_host, format_report

    connection = Connection(args.connect)
    try:
        report = audit_host(connection.get(), args.state_dir, args.mount_base)
        if args.cinder:
            from virtdriver.cinder.audit import add_cinder_dangers
            from virtdriver.cinder.client import Cinder

            add_cinder_dangers(report, connection.get(), Cinder(args.cinder))
    finally:
        connection.close()
    return _shown(report, format_report, args.json, problem=bool(report.dangers))


def _shown(report: Any, text: Any, json_wanted: bool, *, problem: bool) -> int:
    """Print a doctor or audit report (JSON or the operator's text); its exit status."""
    say(as_json(report.to_json()) if json_wanted else text(report))
    return EXIT_PROBLEM if problem else EXIT_OK


def _repair_labels(args: argparse.Namespace) -> int:
    from virtdriver.cli.attach import driver_for
    from virtdriver.hypervisor.locks import guest_lock
    from virtdriver.hypervisor.seclabels import foreign_labels, repair_definition

    driver = driver_for(args)  # its lock directory and lock timeout, as attach's
    connection, options = driver.connection, driver.options
    try:
        conn, models = connection.get(), connection.security_models()
        named = {connection.domain(g).UUIDString(): g for g in args.guests}  # each must exist
        guests = sorted({f.guest_uuid: f.guest for f in foreign_labels(conn, models)
                         if not named or f.guest_uuid in named}.items())
        for uuid, name in guests:
            # The guest's lock, as an attach holds it: the repair rewrites the whole definition.
            with guest_lock(options.lock_dir, uuid, timeout=options.lock_timeout,
                            notice_after=options.lock_notice_after, operation="repair labels"):
                fixed_labels = repair_definition(conn, connection.domain(uuid), models)
            for fixed in fixed_labels:
                say(f"{name}: removed the <seclabel model='{fixed.model}'> of disk "
                    f"{fixed.device} from the definition (the running guest is unchanged)")
        repaired = {uuid for uuid, _ in guests}
        for uuid, name in named.items():
            if uuid not in repaired:
                say(f"{name}: its definition names no security driver this host lacks")
        if not guests and not named:
            say("no guest definition names a security driver this host does not run")
    finally:
        driver.close()
    return EXIT_OK


DOCTOR_DESCRIPTION = """
Check libvirt and QEMU (versions, share-rw for shareable disks), KVM, the security drivers and
SELinux image contexts, os-brick's connector properties, iscsid, the initiator name and host NQN,
multipathd, the kernel modules, which storage protocols can connect on this host (with the
options given: the attach's options), and the lock and mount directories. Each check is ok, warn
or fail; the exit status is 1 when multiattach cannot work here.
"""


def add_operator_commands(sub: Any) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "doctor", help="check that this host can attach and share volumes", formatter_class=raw,
        description=" ".join(DOCTOR_DESCRIPTION.split()),
        epilog="examples:\n"
               "  virtdriver doctor\n"
               "  virtdriver doctor --json | jq .problems\n"
               "  virtdriver -c qemu:///embed?root=/tmp/emb --state-dir /tmp/vd doctor")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    p.add_argument("--mount-base", metavar="DIR",
                   help="where shares are mounted (default: STATE_DIR/mnt)")
    for flag, what in (("--native-iscsi", "QEMU's own iSCSI initiator opens iscsi volumes"),
                       ("--native-glusterfs", "QEMU's own gluster client opens glusterfs "
                                              "volumes"),
                       ("--multipath", "kernel iSCSI, FC and NVMe-oF over every path"),
                       ("--enforce-multipath", "with --multipath: fail without multipathd")):
        p.add_argument(flag, action="store_true", help=f"check as attach {flag} would: {what}")
    p.set_defaults(func=_doctor)

    p = sub.add_parser(
        "audit", help="report every volume's attachments and any danger", formatter_class=raw,
        description="Read every domain on the host and the host-connection records, and list "
                    "each volume (disks with a ua-<volume id> alias, and data that two guests "
                    "share under any name) with its attachments: guest, device, mode, "
                    "shareable, cache, format and per-disk labels. Dangers: a volume in several "
                    "guests with an attachment that is not shareable or is cached on the host; "
                    "a shared read-write disk that is not raw; labels that differ between "
                    "guests; a host connection no guest uses any more; an iSCSI session, NVMe-oF "
                    "controller, mapped RBD image or mount that no record and no guest accounts "
                    "for ('orphan'). The exit status is 1 "
                    "when any danger is found.",
        epilog="examples:\n"
               "  virtdriver audit\n"
               "  virtdriver audit --json | jq '.volumes[] | select(.dangers != [])'")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    p.add_argument("--cinder", metavar="URL",
                   help="also compare the guests with the Cinder attachments that "
                        "'attach --cinder' made there ('cinder' dangers)")
    p.add_argument("--mount-base", metavar="DIR",
                   help="where shares are mounted, an absolute path (default: "
                        "STATE_DIR/mnt): its mounts no record or guest accounts for are orphans")
    p.set_defaults(func=_audit)

    p = sub.add_parser(
        "repair-labels", formatter_class=raw,
        help="remove per-disk labels of security drivers this host does not run",
        description="libvirt refuses to start a guest whose definition gives a disk a "
                    "<seclabel> of a security model its security drivers do not run (an older "
                    "virtdriver wrote selinux labels on every host). This removes such labels "
                    "from the persistent definitions (all guests, or those named); running "
                    "guests are not touched, their next start uses the repaired definition. "
                    "'virtdriver audit' reports them as 'startup' dangers.",
        epilog="examples:\n"
               "  virtdriver repair-labels\n"
               "  virtdriver repair-labels web-1 db-2")
    p.add_argument("guests", nargs="*", metavar="GUEST", help="guest names or UUIDs "
                   "(default: every guest whose definition needs it)")
    add_lock_timeout(p)
    p.set_defaults(func=_repair_labels)
