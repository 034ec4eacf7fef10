"""The ``virtdriver`` commands that talk to libvirt: attach, attach-many, detach, release, list,
capabilities -- and the options and helpers every host command shares (``cli_migrate`` too).

Registered by :func:`add_hypervisor_commands` (listed in ``virtdriver.cli.commands.COMMANDS``).
"""

from __future__ import annotations

import argparse
from typing import Any

from virtdriver.cli.streams import UsageError, as_json, read_volume, say

DEFAULT_TARGET = {"virtio": "vdb", "scsi": "sdb", "sata": "sdb", "usb": "sdb", "ide": "hdb"}


def add_attach_mode(p: argparse.ArgumentParser) -> None:
    p.add_argument("--attach-mode", metavar="ro|rw",
                   help="attach read-only (ro) or read-write (rw); default: a Cinder "
                        "attachment record's own attach_mode, else rw")


def seconds(text: str) -> float:
    """A wait in seconds from the command line, by the rule the API applies."""
    from virtdriver.driver.options import MAX_WAIT, check_timeout
    from virtdriver.errors import InvalidRenderOption

    try:
        return check_timeout(float(text), "")
    except (ValueError, InvalidRenderOption):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds from above 0 to {MAX_WAIT:g}") from None


def add_lock_timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lock-timeout", type=seconds, metavar="S",
                   help="seconds to wait for another operation on the same volume (default "
                        "300); a wait of more than 2 s is said on stderr")


def add_host_options(p: argparse.ArgumentParser, *, locks: bool = True) -> None:
    if locks:  # render takes no lock
        add_lock_timeout(p)
    p.add_argument("--mount-base", metavar="DIR", help="where shares are mounted (nfs, ...)")
    p.add_argument("--label-policy", default="auto", choices=("auto", "explicit", "none"),
                   help="per-disk security labels (default: auto, left to libvirt)")
    p.add_argument("--shared-image-label", metavar="CONTEXT",
                   help="SELinux context for shared disks with --label-policy explicit")
    p.add_argument("--native-iscsi", action="store_true",
                   help="let QEMU's own iSCSI initiator open iscsi volumes")
    p.add_argument("--native-glusterfs", action="store_true",
                   help="let QEMU's own gluster client open glusterfs volumes")
    p.add_argument("--initiator-iqn", metavar="IQN",
                   help="initiator name QEMU's own iSCSI initiator logs in as with "
                        "--native-iscsi (default: the host's, /etc/iscsi/initiatorname.iscsi)")
    p.add_argument("--multipath", action="store_true",
                   help="connect kernel iSCSI, FC and NVMe-oF volumes over every path "
                        "(os-brick multipath)")
    p.add_argument("--enforce-multipath", action="store_true",
                   help="with --multipath: fail when multipathd is not running")


def unit_number(text: str) -> int:
    if not (text.isdigit() and text.isascii() and len(text) <= 9):
        raise argparse.ArgumentTypeError(f"{text!r} is not a unit number")
    return int(text)


def driver_for(args: argparse.Namespace) -> Any:
    from virtdriver.driver import LibvirtVolumeDriver

    return LibvirtVolumeDriver(args.connect, state_dir=args.state_dir,
                               mount_base=getattr(args, "mount_base", None),
                               label_policy=getattr(args, "label_policy", "auto"),
                               shared_image_label=getattr(args, "shared_image_label", None),
                               native_iscsi=getattr(args, "native_iscsi", False),
                               native_glusterfs=getattr(args, "native_glusterfs", False),
                               initiator_iqn=getattr(args, "initiator_iqn", None),
                               use_multipath=getattr(args, "multipath", False),
                               enforce_multipath=getattr(args, "enforce_multipath", False),
                               **({"lock_timeout": args.lock_timeout}
                                  if getattr(args, "lock_timeout", None) else {}))


def table_row(attachment: Any) -> dict[str, Any]:
    """An attachment as a row of ``list``: the API's fields and its error policies in one."""
    row: dict[str, Any] = attachment.to_api()
    write, read = row["error_policy"], row["rerror_policy"]
    row["errors"] = (write or "default") + (f", read {read}" if read and read != write else "")
    return row


def _print_table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> None:
    widths = [max([len(title)] + [len(str(r.get(key, ""))) for r in rows])
              for key, title in columns]
    say("  ".join(title.ljust(w) for (_, title), w in zip(columns, widths)).rstrip())
    say("  ".join("-" * w for w in widths))
    for row in rows:
        say("  ".join(str(row.get(key, "")).ljust(w)
                        for (key, _), w in zip(columns, widths)).rstrip())


ATTACHMENT_COLUMNS = [("device", "Device"), ("volumeId", "Volume"), ("attach_mode", "Mode"),
                      ("shareable", "Shareable"), ("cache", "Cache"), ("errors", "Errors"),
                      ("source", "Source")]


def add_io_options(p: argparse.ArgumentParser, *, override: bool = True) -> None:
    """The attachment's own cache and error policies, and (``override``) the shared-write
    override."""
    p.add_argument("--cache", choices=("none", "directsync"),
                   help="host cache mode (default: none for a multiattach volume, else the "
                        "protocol's)")
    p.add_argument("--error-policy", choices=("stop", "report", "ignore", "enospace"),
                   help="what the guest sees of a write error (default: libvirt's; report for "
                        "--device lun)")
    p.add_argument("--rerror-policy", choices=("stop", "report", "ignore"),
                   help="what the guest sees of a read error (default: as --error-policy)")
    if override:
        p.add_argument("--allow-shared-write", action="store_true",
                       help="let a second guest write a filesystem that is not a cluster one "
                            "(ext4, xfs, ...); noted for 'virtdriver audit'")


def io_options(args: argparse.Namespace) -> dict[str, Any]:
    return {"cache": args.cache, "error_policy": args.error_policy,
            "rerror_policy": args.rerror_policy, "allow_shared_write": args.allow_shared_write}


def _attach(args: argparse.Namespace) -> int:
    placement = dict(target_dev=args.target_dev, bus=args.bus, device=args.device,
                     luks_secret_uuid=args.luks_secret_uuid, **io_options(args))
    if args.cinder is not None or args.volume is not None:
        if args.cinder is None or args.volume is None or args.connection_info is not None:
            raise UsageError("attach: give CONNECTION_INFO, or --cinder URL with --volume ID")
        from virtdriver.cinder import flow as cinder_flow
        from virtdriver.cinder.client import Cinder
        from virtdriver.policy import check_attach_mode
        from virtdriver.policy.identity import check_requested_volume_id

        mode = args.attach_mode and check_attach_mode(args.attach_mode, "--attach-mode")
        att = cinder_flow.attach(driver_for(args), Cinder(args.cinder), args.domain,
                                 check_requested_volume_id(args.volume), mode, **placement)
    else:
        if args.connection_info is None:
            raise UsageError("attach: give CONNECTION_INFO, or --cinder URL with --volume ID")
        info, mode = read_volume(args.connection_info, args.attach_mode, args.multiattach)
        att = driver_for(args).attach_volume(info, args.domain, attach_mode=mode, **placement)
    say(f"Volume {att.volumeId} attached to {att.server_name} as {att.device} "
        f"({att.attach_mode}{', shareable' if att.shareable else ''})")
    return 0


def _attach_many(args: argparse.Namespace) -> int:
    info, mode = read_volume(args.connection_info, args.attach_mode, args.multiattach)
    from virtdriver.cli.progress import Progress

    progress = Progress("attaching", steps=len(args.domains))
    attachments = driver_for(args).attach_volume_to_many(info, args.domains,
                                                      attach_mode=mode,
                                                      progress=progress.step,
                                                      **io_options(args))
    _print_table([dict(table_row(a), guest=a.server_name) for a in attachments],
                 [("guest", "Guest")] + ATTACHMENT_COLUMNS[:6])
    say(f"{len(attachments)} guests attached, host side connected once")
    return 0


def _detach(args: argparse.Namespace) -> int:
    from virtdriver.cinder import flow as cinder_flow

    done = cinder_flow.detach(driver_for(args), args.domain, args.volume_id, args.cinder,
                              timeout=args.timeout)
    said = (f"Volume {args.volume_id} detached from {args.domain}" if done.detached else
            f"Volume {args.volume_id} was no longer attached to {args.domain}")
    say(said + (f"; Cinder attachment {done.attachment} deleted" if done.attachment else ""))
    return 0


def _connector(args: argparse.Namespace) -> int:
    mode = "rw" if args.attach_mode is None else args.attach_mode  # '' is refused, not rw
    props = driver_for(args).connector_properties(mode, my_ip=args.my_ip)
    say(as_json(props, sort_keys=True))
    return 0


def _say_swept(outcome: list[tuple[str, str | None]]) -> None:
    """Each orphan the sweep looked at, released or why kept, and the count."""
    for what, kept in outcome:
        say(f"{what}: " + (f"kept, {kept}" if kept else "released"))
    released = sum(kept is None for _, kept in outcome)
    say(f"{released} orphaned host connection{'s' if released != 1 else ''} released"
        + (f", {len(outcome) - released} kept" if len(outcome) > released else ""))


def _release(args: argparse.Namespace) -> int:
    if args.orphans == (args.volume_id is not None):
        raise UsageError("release: give VOLUME_ID, or --orphans")
    if args.orphans:
        from virtdriver.errors import OrphansNotReleased

        try:
            outcome = driver_for(args).release_orphans()
        except OrphansNotReleased as exc:  # every orphan said, then the failure (exit 1)
            _say_swept(exc.outcome)
            raise
        _say_swept(outcome)
        return 0
    if driver_for(args).release_volume(args.volume_id):
        say(f"Host connection of volume {args.volume_id} released")
    else:
        say(f"Volume {args.volume_id} has no recorded host connection: nothing to release")
    return 0


def _list(args: argparse.Namespace) -> int:
    attachments = driver_for(args).list_attachments(args.domain)
    if args.json:
        say(as_json({"volumeAttachments": [a.to_api() for a in attachments]}))
    else:
        _print_table([table_row(a) for a in attachments], ATTACHMENT_COLUMNS)
    return 0


def _capabilities(args: argparse.Namespace) -> int:
    caps = driver_for(args).capabilities()
    if args.json:
        say(as_json(caps))
    else:
        for key, value in caps.items():
            say(f"{key + ':':<24}{value}")
    return 0


def add_hypervisor_commands(sub: Any) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "attach", help="attach a volume to a guest", formatter_class=raw,
        description="Connect the host side, render the disk and attach it to the running guest "
                    "and its persistent definition. Anything done is undone on failure.",
        epilog="examples:\n"
               "  virtdriver attach guest-a volume.json\n"
               "  virtdriver attach guest-b volume.json --attach-mode ro --multiattach\n"
               "  virtdriver attach guest-c --cinder http://cinder:8776/v3 --volume VOLUME_ID\n"
               "\nCONNECTION_INFO may be Cinder's attachment record, its flat connection_info,\n"
               "nova's or the legacy form (docs/cinder.md). With --cinder, the attachment is\n"
               "created with this host's connector, completed after the attach and deleted\n"
               "again on any failure; 'virtdriver detach' deletes it. Credentials: OS_AUTH_URL,\n"
               "OS_USERNAME, OS_PASSWORD, OS_PROJECT_NAME (keystone), else Cinder's noauth.")
    p.add_argument("domain", metavar="DOMAIN", help="guest name or UUID")
    p.add_argument("connection_info", metavar="CONNECTION_INFO", nargs="?",
                   help="connection_info as a JSON file, or - for stdin")
    p.add_argument("--cinder", metavar="URL",
                   help="Cinder's v3 endpoint: create the attachment there (with --volume)")
    p.add_argument("--volume", metavar="ID", help="with --cinder: the volume to attach")
    add_attach_mode(p)
    p.add_argument("--multiattach", action="store_true", help="the volume is multiattach")
    p.add_argument("--target-dev", metavar="DEV", help="guest device (default: first free)")
    p.add_argument("--bus", choices=sorted(DEFAULT_TARGET),
                   help="guest bus (default: scsi when the guest has a SCSI controller)")
    p.add_argument("--device", default="disk", choices=("disk", "lun"))
    p.add_argument("--luks-secret-uuid", metavar="UUID")
    add_io_options(p)
    add_host_options(p)
    p.set_defaults(func=_attach)

    p = sub.add_parser(
        "attach-many", help="attach one multiattach volume to many guests", formatter_class=raw,
        description="Connect the host side once and attach a multiattach volume to every guest "
                    "in parallel. All or nothing: if one guest fails, every attachment made is "
                    "undone and the failing guest is named.",
        epilog="example:\n  virtdriver attach-many volume.json web-1 web-2 web-3 --attach-mode ro")
    p.add_argument("connection_info", metavar="CONNECTION_INFO",
                   help="connection_info as a JSON file, or - for stdin")
    p.add_argument("domains", metavar="DOMAIN", nargs="+", help="guest names or UUIDs")
    add_attach_mode(p)
    p.add_argument("--multiattach", action="store_true", help="the volume is multiattach")
    add_io_options(p)
    add_host_options(p)
    p.set_defaults(func=_attach_many)

    p = sub.add_parser(
        "detach", help="detach a volume from a guest", formatter_class=raw,
        description="Detach one attachment, wait for libvirt to confirm the removal, and "
                    "disconnect the host side when no other guest on this host uses it. A "
                    "volume attached with --cinder also has its Cinder attachment deleted, "
                    "and only that when the guest no longer has the disk (after a swap).",
        epilog="example:\n  virtdriver detach guest-a 4f1c2b7e-9d1a-4c55-8e0b-2f3a4b5c6d7e")
    p.add_argument("domain", metavar="DOMAIN", help="guest name or UUID")
    p.add_argument("volume_id", metavar="VOLUME_ID")
    p.add_argument("--timeout", type=seconds, metavar="S", help="seconds to wait (default 30)")
    add_lock_timeout(p)
    p.add_argument("--cinder", metavar="URL",
                   help="Cinder endpoint for deleting an attachment made with 'attach --cinder' "
                        "(default: the one it was made at)")
    p.set_defaults(func=_detach)

    p = sub.add_parser(
        "connector", help="this host's connector for the block-storage service",
        formatter_class=raw,
        description="Print this host's connector properties (os-brick's, plus 'mode') as JSON: "
                    "what a block-storage service's attachment API takes.",
        epilog="example:\n  virtdriver connector --attach-mode ro")
    add_attach_mode(p)
    p.add_argument("--my-ip", default="127.0.0.1", metavar="IP",
                   help="this host's address on the storage network (default 127.0.0.1)")
    add_host_options(p)
    p.set_defaults(func=_connector)

    p = sub.add_parser(
        "release", help="release a leaked host connection", formatter_class=raw,
        description="Release the host side recorded for a volume (os-brick connection, libvirt "
                    "secrets, share mount) when no guest on this host uses the volume any more, "
                    "e.g. after a guest disappeared behind virtdriver's back ('virtdriver audit' "
                    "reports such a leak). Refused while any guest uses the volume. With "
                    "--orphans: remove the host connections that no record and no guest "
                    "accounts for (iSCSI sessions, NVMe-oF controllers, mapped RBD images, "
                    "mounts in the mount base; 'orphan' in 'virtdriver audit'), each unless a "
                    "holder, a mount or an open device keeps it (for a mount: a mount below it, "
                    "a process working in it). Each orphan is said, released or why kept; a "
                    "release that fails keeps that one, the others are still swept, and the "
                    "exit status is then 1.",
        epilog="examples:\n  virtdriver release 4f1c2b7e-9d1a-4c55-8e0b-2f3a4b5c6d7e\n"
               "  virtdriver release --orphans")
    p.add_argument("volume_id", metavar="VOLUME_ID", nargs="?")
    p.add_argument("--orphans", action="store_true",
                   help="remove unaccounted host connections instead of one volume's")
    p.add_argument("--mount-base", metavar="DIR",
                   help="where shares are mounted, an absolute path (default: STATE_DIR/mnt)")
    add_lock_timeout(p)
    p.set_defaults(func=_release)

    p = sub.add_parser("list", help="list a guest's volume attachments", formatter_class=raw,
                       description="List the volumes attached to a guest.",
                       epilog="examples:\n  virtdriver list guest-a\n"
                              "  virtdriver list guest-a --json")
    p.add_argument("domain", metavar="DOMAIN", help="guest name or UUID")
    p.add_argument("--json", action="store_true", help="os-volume_attachments JSON")
    p.set_defaults(func=_list)

    p = sub.add_parser("capabilities", help="what this host supports",
                       description="Report multiattach and read-only attach support, read from "
                                   "the running libvirt and QEMU.")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_capabilities)
