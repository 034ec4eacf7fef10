"""``virtdriver swap`` and ``virtdriver extend``: thin over the driver's swap and extend.

Registered by :func:`add_volume_commands` (listed in ``virtdriver.cli.commands.COMMANDS``). A
swap of a running guest shows its block copy as a progress bar on a terminal
(:mod:`virtdriver.cli.progress`); Ctrl-C cancels the copy and the guest keeps its old volume.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from virtdriver.cli.streams import as_json, say, shown_name
from virtdriver.formatting import human

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"([0-9]{1,16})\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)


def size_argument(text: str) -> int:
    """``1073741824``, ``96M``, ``1G``, ``2GiB``: bytes (K, M, G, T are powers of 1024)."""
    match = _SIZE.fullmatch(text.strip())
    if match is None or int(match.group(1)) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (bytes, or with K, M, G, T)")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


# ---- swap -----------------------------------------------------------------------------------


def _swap(args: argparse.Namespace) -> int:
    from virtdriver.cli.attach import driver_for
    from virtdriver.cli.progress import Progress
    from virtdriver.cli.streams import load_connection_info
    from virtdriver.driver.interrupts import Interrupted

    old, new = load_connection_info(args.old), load_connection_info(args.new)
    with Progress("copying to the new volume", show=not args.json) as progress:
        try:
            att = driver_for(args).swap_volume(args.domain, old, new, timeout=args.timeout,
                                               progress=progress)
        except KeyboardInterrupt:
            raise Interrupted(f"the copy was cancelled; {args.domain} keeps its old "
                              "volume") from None
    if args.json:
        say(as_json(att.to_api()))
    else:
        say(f"Guest {att.server_name} now uses volume {att.volumeId} as {att.device} "
            f"({att.attach_mode}{', shareable' if att.shareable else ''})")
    return 0


# ---- extend ---------------------------------------------------------------------------------

EXTEND_COLUMNS = [("guest", "Guest"), ("device", "Device"), ("attach_mode", "Mode"),
                  ("shown", "Size"), ("said", "How")]
HOW = {"resized": "resized; the guest was told",
       "reopened": "reopened read-only; the guest sees it on its next capacity read *",
       "unchanged": "already this size",
       "at start": "shut off; sees it when it starts",
       "failed": "NOT UP TO DATE"}
RESCAN = ("* QEMU tells a guest of a size change only after its own resize, which a read-only\n"
          "  disk refuses. In a Linux guest (a SCSI disk): "
          "echo 1 > /sys/class/block/DISK/device/rescan")


def _extend(args: argparse.Namespace) -> int:
    from virtdriver.cli.attach import _print_table, driver_for
    from virtdriver.cli.streams import load_connection_info

    info = load_connection_info(args.connection_info)
    result = driver_for(args).extend_volume_on_host(info, new_size=args.size,
                                                   instance=args.domain)
    named = "CONNECTION_INFO" if args.connection_info == "-" else shown_name(args.connection_info)
    if args.json:
        data = result.to_json()
        for guest in data["guests"]:
            if guest["fix"]:
                guest["fix"] = runnable(guest["fix"], args, named)
        say(as_json(data))
    else:
        host = "" if result.host_size is None else f" (the host sees {human(result.host_size)})"
        say(f"Volume {result.volume_id} extended to {human(result.size)}{host}")
        rows = [dict(g.to_json(), shown=human(g.size), said=HOW.get(g.how, g.how))
                for g in result.guests]
        _print_table(rows, EXTEND_COLUMNS)
        if any(g.how == "reopened" for g in result.guests):
            say(RESCAN)
    if not result.complete:
        error = result.incomplete_error()
        raise type(error)(runnable(str(error), args, named))
    return 0


def runnable(fix: str, args: argparse.Namespace, named: str) -> str:
    """A printed fix as it runs here: with this command's libvirt URI, state directory and host
    options (those away from their defaults), and the CONNECTION_INFO file it was given."""
    import shlex

    from virtdriver.cli.attach import add_host_options

    defaults = argparse.ArgumentParser(add_help=False)
    add_host_options(defaults, locks=False)  # the host options and their defaults, as parsed
    given = [("-c", args.connect)] if args.connect != "qemu:///system" else []
    if args.state_dir != "/var/lib/virtdriver":
        given.append(("--state-dir", args.state_dir))
    options = ""
    for name, default in vars(defaults.parse_args([])).items():
        value = getattr(args, name, default)
        flag = "--" + name.replace("_", "-")
        if value is True:
            options += f" {flag}"
        elif value != default:
            options += f" {flag} {shlex.quote(str(value))}"
    prefix = "".join(f" {flag} {shlex.quote(str(value))}" for flag, value in given)
    fix = re.sub(r"--cinder \S+ --volume \S+", lambda m: m.group(0) + options, fix)
    fix = re.sub(r"\bvirtdriver (?=(?:detach|attach|extend) )",
                 lambda _: f"virtdriver{prefix} ", fix)
    return fix.replace("CONNECTION_INFO", f"{named}{options}")


def add_volume_commands(sub: Any) -> None:
    from virtdriver.cli.attach import add_host_options, seconds

    raw = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "swap", help="move a guest's disk from one volume to another", formatter_class=raw,
        description="Copy a running guest's disk to the new volume while it runs (a block copy, "
                    "then a switch), keeping its device and attach mode; a shut-off guest's "
                    "definition gets the new volume in place of the old. Refused when another "
                    "guest on this host writes to the old volume. A failure, or Ctrl-C during "
                    "the copy, leaves the guest on the old volume and releases what was "
                    "connected for the new one. On a terminal the copy shows a progress bar.",
        epilog="examples:\n"
               "  virtdriver swap guest-a old-volume.json new-volume.json\n"
               "  virtdriver swap guest-a old.json new.json --timeout 3600 --json")
    p.add_argument("domain", metavar="GUEST", help="guest name or UUID")
    p.add_argument("old", metavar="OLD", help="the attached volume's connection_info (JSON file)")
    p.add_argument("new", metavar="NEW", help="the new volume's connection_info (JSON file, or -)")
    p.add_argument("--timeout", type=seconds, metavar="S",
                   help="seconds the copy may take (default 600)", default=600.0)
    p.add_argument("--json", action="store_true", help="the new attachment as JSON, no progress")
    add_host_options(p)
    p.set_defaults(func=_swap)

    p = sub.add_parser(
        "extend", help="show a grown volume to every guest on this host that uses it",
        formatter_class=raw,
        description="After the volume grew on the storage side: refresh the host side once "
                    "(os-brick), then show the new size to each running guest's QEMU that uses "
                    "the volume (or only GUEST): a read-write attachment is resized, a "
                    "read-only one (which QEMU cannot resize) has its block node opened anew, "
                    "read-only. Prints per guest the size QEMU shows; any guest left behind "
                    "is named with the command that brings it up to date (exit 1).",
        epilog="examples:\n"
               "  virtdriver extend volume.json              "
               "# every guest, the size the host sees\n"
               "  virtdriver extend volume.json guest-b --size 96M\n"
               "  virtdriver extend volume.json --json")
    p.add_argument("connection_info", metavar="CONNECTION_INFO",
                   help="connection_info as a JSON file, or - for stdin")
    p.add_argument("domain", metavar="GUEST", nargs="?", help="only this guest (name or UUID)")
    p.add_argument("--size", type=size_argument, metavar="SIZE",
                   help="new size: bytes, or with K, M, G, T (default: what the host sees)")
    p.add_argument("--json", action="store_true", help="machine-readable result")
    add_host_options(p)
    p.set_defaults(func=_extend)



