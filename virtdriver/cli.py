"""The ``virtdriver`` command line: a thin layer over the public API.

Every failure is one line on stderr (``virtdriver: error: ...``) and a non-zero exit, one per kind
of error (:data:`virtdriver.errors.EXIT_CODES`): 2 for bad input or usage, 3 for a refusal by the
attach policy, 1 for a failure of the host or the hypervisor, 4 for a wait that ran out. Never a
traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

from virtdriver.cli_host import DEFAULT_TARGET, add_attach_mode, add_host_options
from virtdriver.cli_host import add_hypervisor_commands, unit_number
from virtdriver.cli_migrate import add_migration_commands
from virtdriver.cli_ops import add_operator_commands as _add_operator_commands
from virtdriver.cli_volume import add_volume_commands
from virtdriver.cli_io import UsageError, emit, fail, finish_output, read_volume
from virtdriver.cli_io import flush_before_error, output_closed, prepare_output
from virtdriver import logs
from virtdriver.errors import VirtDriverError

# Commands during which nothing but virtdriver's own loggers can log: logging is set up (and
# imported) when one of those is first used, not at the start.
QUIET_STARTS = ("render", "list")
EXIT_FAILED = 1
EXIT_USAGE = 2
TERMINATIONS = (signal.SIGTERM, signal.SIGHUP)



class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse makes a formatter for every argument it adds (to check its metavar), and a
        # formatter without a width imports shutil (bz2, lzma) to size the terminal: the width
        # is found here the way shutil.get_terminal_size finds it.
        return self.formatter_class(prog=self.prog, width=_terminal_width() - 2)


def _terminal_width() -> int:
    """$COLUMNS, else the terminal's width, else 80 (as shutil.get_terminal_size says)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def _render(args: argparse.Namespace) -> int:
    from virtdriver.policy import check_hotplug_bus
    from virtdriver.render import build_disk

    check_hotplug_bus(args.bus, "--bus")  # render prints what attach would use
    info, mode = read_volume(args.connection_info, args.attach_mode, args.multiattach)
    disk = build_disk(
        info, attach_mode=mode,
        target_dev=args.target_dev or DEFAULT_TARGET[args.bus], bus=args.bus, device=args.device,
        scsi_unit=args.scsi_unit, luks_secret_uuid=args.luks_secret_uuid,
        mount_base=args.mount_base, label_policy=args.label_policy,
        shared_image_label=args.shared_image_label, native_iscsi=args.native_iscsi,
        native_glusterfs=args.native_glusterfs)
    emit(disk.to_xml())
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
    p.add_argument("--scsi-unit", type=unit_number, metavar="N",
                   help="SCSI unit (drive address)")
    p.add_argument("--luks-secret-uuid", metavar="UUID",
                   help="libvirt secret holding the LUKS passphrase")
    add_host_options(p, locks=False)
    p.set_defaults(func=_render)



COMMANDS: list[Callable[[Any], None]] = [_add_render, add_hypervisor_commands,
                                          add_volume_commands, _add_operator_commands,
                                          add_migration_commands]


class _Unused:
    """Stands in for the parser of a command not asked for: takes every declaration, builds
    nothing (argparse formats help for each argument it is given: ~5 ms for all commands)."""

    def __getattr__(self, name: str) -> Callable[..., _Unused]:
        return lambda *args, **kwargs: self


class _OnlyCommand:
    """The subparsers action, letting only ``wanted`` be built."""

    def __init__(self, sub: Any, wanted: str) -> None:
        self._sub = sub
        self._wanted = wanted

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        return self._sub.add_parser(name, **kwargs) if name == self._wanted else _Unused()


GLOBAL_WITH_VALUE = ("-c", "--connect", "--state-dir")


def command_of(argv: Sequence[str]) -> str | None:
    """The command named in ``argv`` by a plain reading (global options skipped), or None."""
    tokens = iter(argv)
    for token in tokens:
        if token in GLOBAL_WITH_VALUE:
            next(tokens, None)
        elif token == "--":
            return next(tokens, None)
        elif not token.startswith("-"):
            return token
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``only``, just that command's parser is built."""
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
        add(sub if only is None else _OnlyCommand(sub, only))
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """``argv`` parsed by a parser holding only the command it names; by the whole one when
    that does not give this command (an abbreviated global option read as the command, an
    error: the whole parser then says it exactly as it would have)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    wanted = command_of(argv)
    if wanted is not None:
        try:
            args = build_parser(only=wanted).parse_args(argv)
            if args.command == wanted:
                return args
        except UsageError:
            pass
    return build_parser().parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
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
        if args.command in QUIET_STARTS:  # nothing of others' that logs: set up when we do
            logs.when_first_used(_quiet_logging)
        else:
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
    except KeyboardInterrupt as exc:  # both kinds of Interrupted say what was left as it was
        from virtdriver.driver.interrupts import Interrupted as HeldBack

        if isinstance(exc, HeldBack):  # a held-back signal: which one, and what it left
            fail(f"interrupted ({exc})")
        else:
            fail(f"interrupted: {exc}" if str(exc) else "interrupted")
        return 130


def _quiet_logging() -> None:
    """virtdriver's own errors as one line each. os-brick's and oslo's logging (which logs whole
    tracebacks for a failed connect that we report as one typed error) comes through
    ``virtdriver.backend`` at DEBUG (see :mod:`virtdriver.hypervisor.brick`): not shown here."""
    import logging

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


def exit_code(exc: VirtDriverError) -> int:
    """The exit status of an error's kind (see :data:`virtdriver.errors.EXIT_CODES`)."""
    return exc.exit_code

