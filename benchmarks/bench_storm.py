"""Attach storms: many attaches at once, virtdriver against raw libvirt doing the same in parallel.

    .venv/bin/python benchmarks/bench_storm.py [--counts 16 64] [--shared 64] [--repeats 3]

Two storms, each ``count`` attaches started together from ``count`` threads (what a compute host
sees when many instances ask at once):

- **different volumes**: volume ``i`` (a raw file of its own, the GPFS connector: os-brick's
  connect is a no-op, so its own cost is not measured) to guest ``i``, each by its own
  ``attach_volume`` call; raw: the same rendered disks by ``attachDeviceFlags``;
- **one volume**: one multiattach volume to every guest, each by its own ``attach_volume`` call
  (those that wait for its lock together are attached as one); raw: the same disk to every
  guest.

Per attach: the seconds from the storm's start until that attach returned (the latency a caller
sees). Per storm: the seconds until the last returned. Medians over ``--repeats`` storms, the two
sides taking turns at going first; every disk is removed again between storms. Guests are OS-less
and idle before the first storm (``timing.start_idle``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import libvirt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import file_volume, start_idle, wait_until_idle  # noqa: E402

from testhosts.guests import Guests, open_connection, sparse_file
from virtdriver import LibvirtVolumeDriver, build_disk

FLAGS = libvirt.VIR_DOMAIN_AFFECT_LIVE | libvirt.VIR_DOMAIN_AFFECT_CONFIG


def storm(calls: list[Callable[[], object]]) -> tuple[float, list[float]]:
    """Run every call at once (one thread each, released together); the seconds until the last
    returned, and each call's seconds from the start."""
    ready = threading.Barrier(len(calls) + 1)
    start = 0.0

    def run(call: Callable[[], object]) -> float:
        ready.wait()
        call()
        return time.perf_counter() - start

    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(run, call) for call in calls]
        start = time.perf_counter()
        ready.wait()
        latencies = [f.result() for f in futures]
    return max(latencies), latencies


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def summary(totals: list[float], latencies: list[float]) -> dict[str, float]:
    return {"total_s": round(statistics.median(totals), 4),
            "median_s": round(statistics.median(latencies), 4),
            "p95_s": round(percentile(latencies, 0.95), 4),
            "max_s": round(max(latencies), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--shared", type=int, default=64, help="guests of the one-volume storm")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--settle", type=float, default=0.5,
                        help="seconds of quiet before each storm (libvirtd finishing removals)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    most = max([*args.counts, args.shared])
    conn = open_connection("qemu:///system")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, Guests(conn, memory_mib=64) as guests:
        doms = start_idle(conn, lambda i: guests.start(f"storm{i}"), range(most))
        names = [d.name() for d in doms]
        images = [sparse_file(Path(tmp) / f"vol{i}.raw") for i in range(most)]
        driver = LibvirtVolumeDriver("qemu:///system", state_dir=Path(tmp) / "state")
        warm = file_volume(images[0])  # untimed: os-brick's one-time import and setup
        driver.attach_volume(warm, names[0])
        driver.detach_volume(names[0], warm["data"]["volume_id"])

        def disk_xml(info: dict) -> str:
            return build_disk(info, target_dev="sda", bus="scsi", scsi_unit=0).to_xml()

        def remove(pairs: list[tuple[libvirt.virDomain, str]]) -> None:
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda p: p[0].detachDeviceFlags(p[1], FLAGS), pairs))

        def driver_storm(infos: list[dict]) -> tuple[float, list[float]]:
            calls = [lambda n=name, i=info: driver.attach_volume(i, n, bus="scsi")
                     for name, info in zip(names, infos)]
            result = storm(calls)
            remove([(d, disk_xml(i)) for d, i in zip(doms, infos)])
            for vid in {i["data"]["volume_id"] for i in infos}:
                driver.records.forget(vid)
            return result

        def raw_storm(infos: list[dict]) -> tuple[float, list[float]]:
            xmls = [disk_xml(i) for i in infos]
            calls = [lambda d=dom, x=xml: d.attachDeviceFlags(x, FLAGS)
                     for dom, xml in zip(doms, xmls)]
            result = storm(calls)
            remove(list(zip(doms, xmls)))
            return result

        cases = [("different volumes", count, lambda c: [file_volume(images[i])
                                                          for i in range(c)])
                 for count in args.counts]
        cases.append(("one volume", args.shared, lambda c: _same(file_volume(images[0]), c)))
        for kind, count, make in cases:
            seen: dict[str, tuple[list[float], list[float]]] = {"raw": ([], []),
                                                                  "driver": ([], [])}
            for n in range(args.repeats):
                for side in ("raw", "driver") if n % 2 == 0 else ("driver", "raw"):
                    time.sleep(args.settle)
                    wait_until_idle(conn, doms[:count])
                    total, latencies = (raw_storm if side == "raw" else driver_storm)(
                        make(count))
                    seen[side][0].append(total)
                    seen[side][1].extend(latencies)
            raw, ours = summary(*seen["raw"]), summary(*seen["driver"])
            rows.append({"storm": kind, "attaches": count, "repeats": args.repeats,
                         "raw": raw, "driver": ours,
                         "ratio": round(ours["total_s"] / raw["total_s"], 2),
                         "p95_to_median": round(ours["p95_s"] / ours["median_s"], 2)})
        driver.close()
    if args.json:
        print(json.dumps(rows))
        return
    print(f"{'storm':<18}{'attaches':>9}{'raw total':>11}{'ours total':>11}{'ratio':>7}"
          f"{'ours median':>13}{'p95':>8}{'max':>8}{'p95/median':>12}")
    for r in rows:
        ours = r["driver"]
        print(f"{r['storm']:<18}{r['attaches']:>9}{r['raw']['total_s']:>11.3f}"
              f"{ours['total_s']:>11.3f}{r['ratio']:>7.2f}{ours['median_s']:>13.3f}"
              f"{ours['p95_s']:>8.3f}{ours['max_s']:>8.3f}{r['p95_to_median']:>12.2f}")


def _same(info: dict, count: int) -> list[dict]:
    """One multiattach volume, asked for by ``count`` callers."""
    return [info] * count


if __name__ == "__main__":
    main()
