"""Live migration commands of the ``virtdriver`` CLI (thin over the driver's migration steps).

``migrate`` does all of it from one host operator's shell; the steps are there for a compute
service (or an operator cleaning up) that drives libvirt's migration itself:
``migrate-prepare``, ``migrate-complete`` and ``migrate-abort`` run against the destination
(``-c DEST_URI``), ``migrate-finish`` against the source. See docs/migration.md.
"""

from __future__ import annotations

import argparse
from typing import Any

from virtdriver.cli.streams import say


def _migrate(args: argparse.Namespace) -> int:
    import sys

    from virtdriver.cli.attach import driver_for
    from virtdriver.cli.progress import Progress
    from virtdriver.cli.streams import read_volume
    from virtdriver.driver import LibvirtVolumeDriver
    from virtdriver.driver.interrupts import Interrupts

    infos = [read_volume(path)[0] for path in args.volume]
    # A bar on a terminal (#28); interrupts are the migration's own (held back, below).
    progress = Progress(f"migrating {args.domain}")
    # Held back until this command ends: where the guest is decides the outcome, not the moment.
    with Interrupts() as interrupts:
        interrupts.ignore_after()  # the outcome is decided inside; the exit status reports it
        source = driver_for(args)
        destination = LibvirtVolumeDriver(args.to, options=_dest_options(source, args))
        kept = source.migrate(args.domain, destination, infos, uri=args.migration_uri,
                              peer_to_peer=args.p2p, interrupts=interrupts,
                              progress=progress, allow_shared_write=args.allow_shared_write)
        progress.close()
        say(f"Guest {args.domain} migrated to {args.to}")
        for vid in kept:
            say(f"Volume {vid} stays connected on this host: other guests here still use it")
        if interrupts.received is not None:
            print(f"virtdriver: {interrupts.name} came after the guest had moved: the migration "
                  "was completed", file=sys.stderr)
    return 0


def _dest_options(source: Any, args: argparse.Namespace) -> Any:
    from dataclasses import replace

    return replace(source.options, state_dir=args.dest_state_dir,
                   mount_base=args.dest_mount_base)


def _prepare(args: argparse.Namespace) -> int:
    from virtdriver.cli.attach import driver_for
    from virtdriver.cli.streams import read_volume

    info, mode = read_volume(args.connection_info, args.attach_mode)
    driver_for(args).prepare_incoming(info, args.domain, mode,
                                      allow_shared_write=args.allow_shared_write)
    say(f"Volume connected on this host for {args.domain}, arriving by live migration")
    return 0


def _finish(args: argparse.Namespace) -> int:
    from virtdriver.cli.attach import driver_for

    users = driver_for(args).finish_outgoing(args.domain, args.volume_id,
                                             leftover_definition=args.leftover_definition)
    if users:
        say(f"Volume {args.volume_id} stays connected: still used by {', '.join(users)}")
    else:
        say(f"No guest on this host uses volume {args.volume_id} any more; its host "
            "connection (if it had one) is released")
    return 0


def _complete(args: argparse.Namespace) -> int:
    from virtdriver.cli.attach import driver_for

    if driver_for(args).complete_incoming(args.domain, args.volume_id):
        say(f"Guest {args.domain} arrived: volume {args.volume_id} is its own disk here now")
    else:
        say(f"Volume {args.volume_id} has no arrival of {args.domain} to complete")
    return 0


def _abort(args: argparse.Namespace) -> int:
    from virtdriver.cli.attach import driver_for

    if driver_for(args).abort_incoming(args.domain, args.volume_id):
        say(f"Preparation of volume {args.volume_id} for {args.domain} undone")
    else:
        say(f"Volume {args.volume_id} was not prepared for {args.domain}: nothing to undo")
    return 0


def _add_override(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-shared-write", action="store_true",
                   help="let the arriving guest be a second writer of a filesystem that is not a "
                        "cluster one (ext4, xfs, ...) on the destination")


def add_migration_commands(sub: Any) -> None:
    from virtdriver.cli.attach import add_attach_mode, add_host_options, add_lock_timeout

    p = sub.add_parser(
        "migrate", help="live-migrate a guest and its volumes to another host",
        description="Live-migrate DOMAIN from this host (-c) to --to, preparing its volumes "
                    "there first and releasing them here only when no other guest here uses "
                    "them. A failure leaves both hosts as they were.")
    p.add_argument("domain", metavar="DOMAIN", help="guest name or UUID")
    p.add_argument("--to", required=True, metavar="URI", help="the destination's libvirt URI")
    p.add_argument("--volume", action="append", default=[], metavar="CONNECTION_INFO",
                   help="connection_info JSON of one of the guest's volumes for the destination "
                        "(file or -), once per volume")
    p.add_argument("--dest-state-dir", required=True, metavar="DIR",
                   help="the destination's state directory (its locks and records)")
    p.add_argument("--dest-mount-base", metavar="DIR", help="the destination's mount base")
    p.add_argument("--migration-uri", metavar="URI",
                   help="where QEMU sends the migration stream (e.g. tcp://10.0.0.2:49152)")
    p.add_argument("--p2p", action="store_true",
                   help="peer to peer: this host's libvirtd opens --to itself and drives the "
                        "migration (the URI must work from that daemon)")
    _add_override(p)
    add_host_options(p)
    p.set_defaults(func=_migrate)

    p = sub.add_parser("migrate-prepare", help="on the destination: connect a volume for a "
                                               "guest about to arrive")
    p.add_argument("connection_info", metavar="CONNECTION_INFO", help="JSON file, or -")
    p.add_argument("domain", metavar="DOMAIN", help="the arriving guest's UUID (or name)")
    add_attach_mode(p)
    _add_override(p)
    add_host_options(p)
    p.set_defaults(func=_prepare)

    for name, func, where in (("migrate-finish", _finish, "on the source, after the guest "
                               "left: release a volume unless another guest here uses it"),
                              ("migrate-complete", _complete, "on the destination, once the "
                               "guest arrived: forget its arrival (the end of migrate-prepare)"),
                              ("migrate-abort", _abort, "on the destination, after a failed "
                               "migration: undo migrate-prepare")):
        p = sub.add_parser(name, help=where, description=where[0].upper() + where[1:] + ".")
        p.add_argument("domain", metavar="DOMAIN", help="the guest's UUID (or name)")
        p.add_argument("volume_id", metavar="VOLUME_ID")
        if func is _finish:
            p.add_argument("--leftover-definition", action="store_true",
                           help="the guest left by live migration and only its (shut off) "
                                "definition stayed here: do not count it")
        add_lock_timeout(p)
        p.set_defaults(func=func)
