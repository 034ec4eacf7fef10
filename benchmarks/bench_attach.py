"""Attach and detach latency: the driver against raw libvirt calls, same guest and disk, with N
running guests on the host.

    .venv/bin/python benchmarks/bench_attach.py [--rounds 30] [--guests 1 32 96]

For each guest count (the host grows from one count to the next), every guest runs with a volume
of its own attached through the driver (so each has a disk, and the host has a host-connection
record per guest, as a compute host would), and one of them is measured on. The sides alternate
within each round, each taking each place in the round equally often, so that noise hits all
alike; medians are reported.

- raw: ``attachDeviceFlags`` of the disk the driver would render (same target and unit), then
  ``detachDeviceFlags`` and a wait for DEVICE_REMOVED;
- virtdriver: ``attach_volume`` / ``detach_volume`` of a raw file volume (the GPFS connector:
  os-brick's connect is a no-op for it, so its own cost is excluded);
- floor: the raw attach preceded by the libvirt calls a read of who uses the data needs (both
  domain lists, each domain's live and persistent XML) and nothing else -- what any driver pays
  that answers that question from libvirt without a cache; for detach, the raw detach and its
  DEVICE_REMOVED followed by the same read (is the volume still used on this host?).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import libvirt

# testhosts/ is not installed: it comes from the checkout this script is in
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import LibvirtCalls, attach_host, file_volume, round_trips, timed  # noqa: E402

from testhosts.guests import DeviceEvents, detach_and_wait  # noqa: E402
from virtdriver import LibvirtVolumeDriver, build_disk  # noqa: E402

FLAGS = libvirt.VIR_DOMAIN_AFFECT_LIVE | libvirt.VIR_DOMAIN_AFFECT_CONFIG


def measure(conn: libvirt.virConnect, events: DeviceEvents, driver: LibvirtVolumeDriver,
            dom: libvirt.virDomain, image: Path, rounds: int, settle: float) -> dict[str, float]:
    """Median milliseconds of each side, ``rounds`` alternating rounds on ``dom`` (and the
    driver's own CPU per attach and detach, ``*_cpu``)."""

    def read_host() -> None:
        """The round trips of a read of the host: no Python work."""
        running = {d.UUIDString(): d for d in
                   conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)}
        defined = {d.UUIDString(): d for d in
                   conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_PERSISTENT)}
        for uuid_, each in (running | defined).items():
            try:
                each.XMLDesc(0)
                if uuid_ in running and uuid_ in defined:
                    each.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
            except libvirt.libvirtError as exc:  # another user's guest went away meanwhile
                if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                    raise

    def read_then_attach(xml: str) -> None:
        """The host read, then the raw attach."""
        read_host()
        dom.attachDeviceFlags(xml, FLAGS)

    def raw_detach(xml: str, alias: str) -> None:
        detach_and_wait(events, dom, xml, alias, timeout=60, flags=FLAGS)

    def detach_then_read(xml: str, alias: str) -> None:
        """The raw detach and its DEVICE_REMOVED, then the host read."""
        raw_detach(xml, alias)
        read_host()

    times: dict[str, list[float]] = {k: [] for k in ("raw_attach", "raw_detach", "attach",
                                                     "detach", "read_attach", "read_detach",
                                                     "attach_cpu", "detach_cpu")}

    def take(name: str, call: Callable[..., object], *args: object) -> None:
        wall, cpu = timed(call, *args, settle=settle)
        times[name].append(wall)
        if name + "_cpu" in times:
            times[name + "_cpu"].append(cpu)

    def raw(info: dict, xml: str, alias: str) -> None:
        take("raw_attach", dom.attachDeviceFlags, xml, FLAGS)
        take("raw_detach", raw_detach, xml, alias)

    def ours(info: dict, xml: str, alias: str) -> None:
        take("attach", driver.attach_volume, info, dom.name())
        take("detach", driver.detach_volume, dom.name(), info["data"]["volume_id"])
        events.clear()  # the driver waited for its own DEVICE_REMOVED

    def floor(info: dict, xml: str, alias: str) -> None:
        take("read_attach", read_then_attach, xml)
        take("read_detach", detach_then_read, xml, alias)

    sides = [raw, ours, floor]
    for n in range(rounds):
        # Each side takes each place in the round equally often (what libvirtd still does
        # after the previous detach must not favour one side).
        for side in sides[n % 3:] + sides[:n % 3]:
            info = file_volume(image)
            # The disk the driver renders for this guest: its second disk, sdb on unit 1.
            xml = build_disk(info, target_dev="sdb", bus="scsi", scsi_unit=1).to_xml()
            side(info, xml, f"ua-{info['data']['volume_id']}")
    return {k: statistics.median(v) * 1000 for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--guests", type=int, nargs="+", default=[1],
                        help="running guests on the host (several: measured in turn, the host "
                             "growing from one count to the next)")
    parser.add_argument("--settle", type=float, default=0.05,
                        help="seconds of quiet before each timed call, so that neither side "
                             "starts while libvirtd still finishes the previous removal")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    with attach_host("bench") as host:
        conn, driver, image = host.conn, host.driver, host.image
        events = DeviceEvents(conn)
        for count in sorted(set(args.guests)):
            dom = host.grow(count)
            events.clear()
            med = measure(conn, events, driver, dom, image, args.rounds, args.settle)
            counted = file_volume(image)
            with LibvirtCalls().installed() as calls:  # one untimed run
                trips = {"attach": round_trips(calls.count(
                             lambda counted=counted, dom=dom: driver.attach_volume(
                                 counted, dom.name()))),
                         "detach": round_trips(calls.count(
                             lambda counted=counted, dom=dom: driver.detach_volume(
                                 dom.name(), counted["data"]["volume_id"])))}
            events.clear()
            row = {"guests": count, "domains": len(conn.listAllDomains()),
                   **{f"{k}_ms": round(v, 2) for k, v in med.items()},
                   "attach_ratio": round(med["attach"] / med["raw_attach"], 3),
                   "detach_ratio": round(med["detach"] / med["raw_detach"], 3),
                   "read_attach_ratio": round(med["read_attach"] / med["raw_attach"], 3),
                   "read_detach_ratio": round(med["read_detach"] / med["raw_detach"], 3),
                   "floor_attach_ratio": round(med["attach"] / med["read_attach"], 3),
                   "floor_detach_ratio": round(med["detach"] / med["read_detach"], 3),
                   "attach_round_trips": trips["attach"], "detach_round_trips": trips["detach"],
                   "rounds": args.rounds}
            rows.append(row)
            if not args.json:
                print(f"{count} guest(s) ({row['domains']} domains on the host), medians of "
                      f"{args.rounds} alternating rounds:")
                print(f"  {'':<34}{'raw (ms)':>10}{'virtdriver (ms)':>17}{'ratio':>8}")
                for op in ("attach", "detach"):
                    print(f"  {op:<34}{row['raw_' + op + '_ms']:>10.1f}{row[op + '_ms']:>17.1f}"
                          f"{row[op + '_ratio']:>8.2f}")
                print(f"  {'raw attach after the host read':<34}{row['raw_attach_ms']:>10.1f}"
                      f"{row['read_attach_ms']:>17.1f}{row['read_attach_ratio']:>8.2f}")
                print(f"  {'raw detach, then the host read':<34}{row['raw_detach_ms']:>10.1f}"
                      f"{row['read_detach_ms']:>17.1f}{row['read_detach_ratio']:>8.2f}")
                print(f"  virtdriver / floor: attach {row['floor_attach_ratio']:.2f}, detach "
                      f"{row['floor_detach_ratio']:.2f}")
                print(f"  calls to libvirtd: attach {trips['attach']}, detach {trips['detach']} "
                      "(raw: 1 each)")
                print(f"  virtdriver's own CPU (median): attach {row['attach_cpu_ms']:.2f} ms, "
                      f"detach {row['detach_cpu_ms']:.2f} ms")
    if args.json:
        print(json.dumps(rows if len(rows) > 1 else rows[0]))


if __name__ == "__main__":
    main()
