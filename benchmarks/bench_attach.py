"""Attach and detach latency: the driver against raw libvirt calls, same guest and disk.

    .venv/bin/python benchmarks/bench_attach.py [--rounds 30]

Raw: ``attachDeviceFlags`` of the rendered XML, then ``detachDeviceFlags`` and a wait for the
DEVICE_REMOVED event. Also measured: raw attach preceded by the libvirt calls the driver's safety
read of the host needs (both domain lists, each domain's live and persistent XML) and nothing
else, the floor any driver that reads who uses a volume from libvirt pays. Driver: ``attach_volume`` / ``detach_volume`` of a raw file volume (the
GPFS connector: os-brick's connect is a no-op for it, so its own cost is excluded). Rounds
alternate between the two so noise hits both alike; medians are reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import libvirt

# testhosts/ is not installed: it comes from the checkout this script is in
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from virtdriver import LibvirtVolumeDriver, build_disk
from testhosts.guests import DeviceEvents, Guests, detach_and_wait, open_connection, sparse_file

FLAGS = libvirt.VIR_DOMAIN_AFFECT_LIVE | libvirt.VIR_DOMAIN_AFFECT_CONFIG


def timed(settle: float, call: Callable[..., object], *args: object) -> float:
    """Seconds ``call`` takes, started after ``settle`` seconds of quiet."""
    time.sleep(settle)
    start = time.perf_counter()
    call(*args)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--settle", type=float, default=0.05,
                        help="seconds of quiet before each timed call, so that neither side "
                             "starts while libvirtd still finishes the previous removal")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    conn = open_connection("qemu:///system")
    events = DeviceEvents(conn)

    def read_then_attach(xml: str) -> None:
        """The round trips of the driver's host read, then the raw attach: no Python work."""
        running = {d.UUIDString(): d for d in
                   conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)}
        defined = {d.UUIDString(): d for d in
                   conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_PERSISTENT)}
        for uuid_, each in (running | defined).items():
            each.XMLDesc(0)
            if uuid_ in running and uuid_ in defined:
                each.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
        dom.attachDeviceFlags(xml, FLAGS)

    def raw_detach(xml: str, alias: str) -> None:
        detach_and_wait(events, dom, xml, alias, timeout=30, flags=FLAGS)

    with tempfile.TemporaryDirectory() as tmp, Guests(conn) as guests:
        dom = guests.start("bench")
        image = sparse_file(Path(tmp) / "bench.raw")
        driver = LibvirtVolumeDriver("qemu:///system", state_dir=Path(tmp) / "state")
        times: dict[str, list[float]] = {k: [] for k in ("raw_attach", "raw_detach", "attach",
                                                         "detach", "read_attach")}
        for _ in range(args.rounds):
            vid = str(uuid.uuid4())
            info = {"driver_volume_type": "gpfs", "serial": vid, "multiattach": True,
                    "data": {"volume_id": vid, "device_path": str(image)}}
            xml = build_disk(info, target_dev="sda", bus="scsi", scsi_unit=0).to_xml()
            alias = f"ua-{vid}"
            times["raw_attach"].append(timed(args.settle, dom.attachDeviceFlags, xml, FLAGS))
            times["raw_detach"].append(timed(args.settle, raw_detach, xml, alias))
            times["attach"].append(timed(args.settle, driver.attach_volume, info, dom.name()))
            times["detach"].append(timed(args.settle, driver.detach_volume, dom.name(), vid))
            events.clear()  # the driver waited for its own DEVICE_REMOVED
            times["read_attach"].append(timed(args.settle, read_then_attach, xml))
            raw_detach(xml, alias)
        driver.close()
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    result = {f"{k}_ms": round(v, 2) for k, v in med.items()}
    result["attach_ratio"] = round(med["attach"] / med["raw_attach"], 2)
    result["detach_ratio"] = round(med["detach"] / med["raw_detach"], 2)
    result["read_attach_ratio"] = round(med["read_attach"] / med["raw_attach"], 2)
    result["rounds"] = args.rounds
    if args.json:
        print(json.dumps(result))
        return
    print(f"{'operation':<10}{'raw libvirt (ms)':>18}{'virtdriver (ms)':>18}{'ratio':>8}")
    for op in ("attach", "detach"):
        print(f"{op:<10}{med['raw_' + op]:>18.1f}{med[op]:>18.1f}{result[op + '_ratio']:>8.2f}")
    print(f"{'raw attach after the host read':<34}{med['read_attach']:>18.1f}"
          f"{result['read_attach_ratio']:>8.2f}  (the floor of reading libvirt first)")
    print(f"medians of {args.rounds} alternating rounds on one guest")


if __name__ == "__main__":
    main()
