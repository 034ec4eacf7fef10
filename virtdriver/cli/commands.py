"""The ``virtdriver`` command line: a thin layer over the public API.

Every failure is one line on stderr (``virtdriver: error: ...``) and a non-zero exit, one per kind
of error (:data:`virtdriver.errors.EXIT_CODES`): 2 for bad input or usage, 3 for a refusal by the
attach policy, 1 for a failure of the host or the hypervisor, 4 for a wait that ran out. Never a
traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

from virtdriver.cli.attach import (
    DEFAULT_TARGET,
    add_attach_mode,
    add_host_options,
    add_hypervisor_commands,
    add_io_options,
    unit_number,
)
from virtdriver.cli.migrate import add_migration_commands
from virtdriver.cli.ops import add_operator_commands as _add_operator_commands
from virtdriver.cli.streams import (
    UsageError,
    emit,
    fail,
    finish_output,
    flush_before_error,
    output_closed,
    prepare_output,
    read_volume,
)
from virtdriver.cli.swap_extend import add_volume_commands
from virtdriver.errors import VirtDriverError

EXIT_FAILED = 1
EXIT_USAGE = 2
TERMINATIONS = (signal.SIGTERM, signal.SIGHUP)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _render(args: argparse.Namespace) -> int:
    from virtdriver.policy import check_hotplug_bus
    from virtdriver.render import build_disk

    check_hotplug_bus(args.bus, "--bus")  # render prints what attach would use
    info, mode = read_volume(args.connection_info, args.attach_mode, args.multiattach)
    def render(models: tuple[str, ...] | None = None) -> Any:
        return build_disk(
            info, attach_mode=mode,
            target_dev=args.target_dev or DEFAULT_TARGET[args.bus], bus=args.bus,
            device=args.device, scsi_unit=args.scsi_unit, luks_secret_uuid=args.luks_secret_uuid,
            mount_base=args.mount_base, label_policy=args.label_policy,
            shared_image_label=args.shared_image_label, native_iscsi=args.native_iscsi,
            native_glusterfs=args.native_glusterfs, security_models=models, cache=args.cache,
            error_policy=args.error_policy, rerror_policy=args.rerror_policy)

    disk = render()  # the input's own errors first, before libvirt is asked anything
    if args.label_policy != "auto":  # per-disk labels: for this host's drivers, as attach writes
        models = _host_security_models(args.connect)
        if models is not None:
            disk = render(models)
    emit(disk.to_xml())
    return 0


def _host_security_models(uri: str) -> tuple[str, ...] | None:
    """The security drivers of the libvirt at ``uri``; ``None`` (every model) if none answers."""
    import libvirt

    from virtdriver.hypervisor.connection import security_models

    try:
        conn = libvirt.openReadOnly(uri)
    except libvirt.libvirtError:
        print(f"virtdriver: libvirt at {uri} does not answer: labels are written for every "
              "security driver", file=sys.stderr)
        return None
    try:
        return security_models(conn.getCapabilities())
    finally:
        conn.close()


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
    p.add_argument("--scsi-unit", type=unit_number, metavar="N",
                   help="SCSI unit (drive address)")
    p.add_argument("--luks-secret-uuid", metavar="UUID",
                   help="libvirt secret holding the LUKS passphrase")
    add_io_options(p, override=False)
    add_host_options(p, locks=False)
    p.set_defaults(func=_render)


COMMANDS: list[Callable[[Any], None]] = [_add_render, add_hypervisor_commands,
                                          add_volume_commands, _add_operator_commands,
                                          add_migration_commands]


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    parser = _Parser(
        prog="virtdriver",
        description="Attach block-storage volumes to libvirt/KVM guests, multiattach done right.",
        epilog="Run 'virtdriver COMMAND --help' for a command's options and examples.")
    parser.add_argument("-c", "--connect", metavar="URI",
                        default=os.environ.get("VIRTDRIVER_URI", "qemu:///system"),
                        help="libvirt URI (default: $VIRTDRIVER_URI or qemu:///system)")
    parser.add_argument("--state-dir", metavar="DIR",
                        default=os.environ.get("VIRTDRIVER_STATE_DIR", "/var/lib/virtdriver"),
                        help="locks and host-connection records (default: /var/lib/virtdriver)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for add in COMMANDS:
        add(sub)
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """``argv`` (default: the process's arguments) parsed by the whole command line."""
    return build_parser().parse_args(sys.argv[1:] if argv is None else list(argv))


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run its command: its exit status (see the module's docstring)."""
    warnings.simplefilter("ignore")  # os-brick's eventlet warnings are not for the operator
    with _terminations_interrupt():
        return _main(argv)


@contextlib.contextmanager
def _terminations_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP end a command as Ctrl-C does: a copy cancelled, a failure undone."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only
        return
    previous = {sig: signal.signal(sig, _interrupt) for sig in TERMINATIONS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _main(argv: Sequence[str] | None) -> int:
    try:
        prepare_output()
        if argv is not None and (isinstance(argv, (str, bytes)) or not isinstance(argv, Sequence)
                                 or not all(isinstance(a, str) for a in argv)):
            raise UsageError(f"arguments: {type(argv).__name__} {str(argv)[:60]!r} is not a "
                             "list of strings")
        args = parse_args(argv)
        _quiet_logging()
        code = int(args.func(args))
        finish_output()
        return code
    except UsageError as exc:
        fail(str(exc))
        return EXIT_USAGE
    except VirtDriverError as exc:
        flush_before_error()  # what was printed before it (extend's table)
        fail(str(exc))
        return exit_code(exc)
    except BrokenPipeError:  # a table or message printed to a reader that went away
        fail(output_closed())
        return EXIT_USAGE
    except KeyboardInterrupt as exc:  # an Interrupted says what it left as it was
        fail(f"interrupted ({exc})" if str(exc) else "interrupted")
        return 130


def _quiet_logging() -> None:
    """virtdriver's own errors as one line each. os-brick's and oslo's logging (which logs whole
    tracebacks for a failed connect that we report as one typed error) comes through
    ``virtdriver.backend`` at DEBUG (see :mod:`virtdriver.hypervisor.brick`): not shown here."""
    class OneLine(logging.Formatter):
        """Log records as single lines: no tracebacks on the operator's terminal."""

        def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
            return ""

        def format(self, record: logging.LogRecord) -> str:
            record.exc_text = ""
            return " ".join(super().format(record).split())

    if not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(OneLine("virtdriver: %(message)s"))
        logging.getLogger().addHandler(handler)
        logging.getLogger().setLevel(logging.ERROR)
        # A wait for another operation's lock is said as it happens (see hypervisor.locks).
        logging.getLogger("virtdriver.locks").setLevel(logging.WARNING)
        # So is an attach that falls back to one path (see driver.compute_host).
        logging.getLogger("virtdriver.paths").setLevel(logging.WARNING)
        # And what a shared volume holds, beside a writer (see driver.attach).
        logging.getLogger("virtdriver.sharing").setLevel(logging.WARNING)


def exit_code(exc: VirtDriverError) -> int:
    """The exit status of an error's kind (see :data:`virtdriver.errors.EXIT_CODES`)."""
    return exc.exit_code

