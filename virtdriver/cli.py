"""The ``virtdriver`` command line: a thin layer over the public API.

Every failure is one line on stderr (``virtdriver: error: ...``) and a non-zero exit: 2 for bad
input or usage, 1 for an operation the host refused. Never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from virtdriver.errors import VirtDriverError

EXIT_FAILED = 1
EXIT_USAGE = 2

DEFAULT_TARGET = {"virtio": "vdb", "scsi": "sdb", "sata": "sdb", "usb": "sdb", "ide": "hdb"}


class UsageError(Exception):
    """Bad command-line input; reported in one line with exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def load_connection_info(path: str) -> Any:
    """Read CONNECTION_INFO from a JSON file, or from standard input for ``-``."""
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno}, "
                         f"column {exc.colno})") from None


def _render(args: argparse.Namespace) -> int:
    from virtdriver.render import build_disk

    info = load_connection_info(args.connection_info)
    if args.multiattach:
        if not isinstance(info, dict):
            raise UsageError("connection_info: is not a JSON object")
        info["multiattach"] = True
    disk = build_disk(
        info, attach_mode=args.attach_mode,
        target_dev=args.target_dev or DEFAULT_TARGET[args.bus], bus=args.bus, device=args.device,
        scsi_unit=args.scsi_unit, luks_secret_uuid=args.luks_secret_uuid,
        mount_base=args.mount_base, label_policy=args.label_policy,
        shared_image_label=args.shared_image_label, native_iscsi=args.native_iscsi,
        native_glusterfs=args.native_glusterfs)
    print(disk.to_xml())
    return 0


def _add_render(sub: Any) -> None:
    p = sub.add_parser(
        "render", help="print the <disk> XML for a volume",
        description="Print the libvirt <disk> XML for a volume, as attach would use it.",
        epilog="examples:\n"
               "  virtdriver render volume.json --attach-mode ro --multiattach\n"
               "  virtdriver render - --bus scsi --target-dev sdc --scsi-unit 2 < volume.json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("connection_info", metavar="CONNECTION_INFO",
                   help="the storage service's connection_info as a JSON file, or - for stdin")
    add_attach_mode(p)
    p.add_argument("--multiattach", action="store_true",
                   help="treat the volume as multiattach (sets connection_info.multiattach)")
    p.add_argument("--target-dev", metavar="DEV", help="guest device name (default: vdb/sdb)")
    p.add_argument("--bus", default="virtio", choices=sorted(DEFAULT_TARGET),
                   help="guest bus (default: virtio)")
    p.add_argument("--device", default="disk", choices=("disk", "lun"),
                   help="disk, or lun for SCSI pass-through (default: disk)")
    p.add_argument("--scsi-unit", type=_unit, metavar="N", help="SCSI unit (drive address)")
    p.add_argument("--luks-secret-uuid", metavar="UUID",
                   help="libvirt secret holding the LUKS passphrase")
    add_host_options(p)
    p.set_defaults(func=_render)


def add_attach_mode(p: argparse.ArgumentParser) -> None:
    p.add_argument("--attach-mode", default="rw", metavar="ro|rw",
                   help="attach read-only (ro) or read-write (rw, the default)")


def add_host_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mount-base", metavar="DIR", help="where shares are mounted (nfs, ...)")
    p.add_argument("--label-policy", default="auto", choices=("auto", "explicit", "none"),
                   help="per-disk security labels (default: auto, left to libvirt)")
    p.add_argument("--shared-image-label", metavar="CONTEXT",
                   help="SELinux context for shared disks with --label-policy explicit")
    p.add_argument("--native-iscsi", action="store_true",
                   help="let QEMU's own iSCSI initiator open iscsi volumes")
    p.add_argument("--native-glusterfs", action="store_true",
                   help="let QEMU's own gluster client open glusterfs volumes")


def _unit(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a unit number")
    return int(text)


COMMANDS: list[Callable[[Any], None]] = [_add_render]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="virtdriver",
        description="Attach block-storage volumes to libvirt/KVM guests, multiattach done right.",
        epilog="Run 'virtdriver COMMAND --help' for a command's options and examples.")
    parser.add_argument("-c", "--connect", metavar="URI",
                        default=os.environ.get("VIRTDRIVER_URI", "qemu:///system"),
                        help="libvirt URI (default: $VIRTDRIVER_URI or qemu:///system)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args))
    except UsageError as exc:
        _fail(str(exc))
        return EXIT_USAGE
    except VirtDriverError as exc:
        _fail(str(exc))
        return exit_code(exc)
    except KeyboardInterrupt:
        _fail("interrupted")
        return 130


def exit_code(exc: VirtDriverError) -> int:
    from virtdriver.errors import HypervisorError

    return EXIT_FAILED if isinstance(exc, HypervisorError) else EXIT_USAGE


def _fail(message: str) -> None:
    print(f"virtdriver: error: {' '.join(message.split())}", file=sys.stderr)
