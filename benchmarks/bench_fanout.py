"""Fan-out: one multiattach volume to 8, 16 and 32 guests, driver against a raw libvirt loop.

    .venv/bin/python benchmarks/bench_fanout.py [--counts 8 16 32] [--png benchmarks/fanout.png]

Raw: the same rendered disk attached to every guest by ``attachDeviceFlags`` from a thread pool
of the same width the driver uses. Driver: ``attach_volume_to_many`` (host state read, one host
connect, parallel attaches). Measured once every guest is idle (``timing.start_idle``: an
OS-less guest's firmware keeps a core busy for seconds after it starts), the two sides taking
turns at going first; between measurements every disk is removed again. Medians of ``--repeats``
rounds. The PNG plots time against guest count for both (needs the ``bench`` extra:
matplotlib).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import libvirt

# testhosts/ is not installed: it comes from the checkout this script is in
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import start_idle  # noqa: E402

from testhosts.guests import Guests, open_connection, sparse_file
from virtdriver import LibvirtVolumeDriver, build_disk
from virtdriver.hypervisor import brick

FLAGS = libvirt.VIR_DOMAIN_AFFECT_LIVE | libvirt.VIR_DOMAIN_AFFECT_CONFIG
WIDTH = 16


def volume(image: Path) -> dict:
    vid = str(uuid.uuid4())
    return {"driver_volume_type": "gpfs", "serial": vid, "multiattach": True,
            "data": {"volume_id": vid, "device_path": str(image)}}


def remove_all(doms: list[libvirt.virDomain], xml: str) -> None:
    with ThreadPoolExecutor(WIDTH) as pool:
        list(pool.map(lambda d: d.detachDeviceFlags(xml, FLAGS), doms))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--settle", type=float, default=0.2,
                        help="seconds of quiet before each round "
                             "(libvirtd finishing the removals)")
    parser.add_argument("--png", default=str(Path(__file__).with_name("fanout.png")))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    connects = 0
    real_connect = brick.connect

    def counting_connect(*a: object, **kw: object) -> dict:
        nonlocal connects
        connects += 1
        return real_connect(*a, **kw)  # type: ignore[arg-type]

    brick.connect = counting_connect  # type: ignore[assignment]
    conn = open_connection("qemu:///system")
    rows = []
    with tempfile.TemporaryDirectory() as tmp, Guests(conn, memory_mib=96) as guests:
        image = sparse_file(Path(tmp) / "shared.raw")
        doms = start_idle(conn, lambda i: guests.start(f"fan{i}"), range(max(args.counts)))
        driver = LibvirtVolumeDriver("qemu:///system", state_dir=Path(tmp) / "state")

        def driver_round(subset: list[libvirt.virDomain]) -> tuple[float, int]:
            """Seconds for one fan-out and the host connects it made; then undone."""
            info = volume(image)
            before = connects
            t0 = time.perf_counter()
            driver.attach_volume_to_many(info, [d.name() for d in subset], max_parallel=WIDTH)
            elapsed = time.perf_counter() - t0
            remove_all(subset, build_disk(info, target_dev="sda", bus="scsi",
                                          scsi_unit=0).to_xml())
            driver.records.forget(info["data"]["volume_id"])
            return elapsed, connects - before

        def raw_round(subset: list[libvirt.virDomain]) -> float:
            """Seconds for the same attaches from a raw parallel loop; then undone."""
            xml = build_disk(volume(image), target_dev="sda", bus="scsi", scsi_unit=0).to_xml()
            t0 = time.perf_counter()
            with ThreadPoolExecutor(WIDTH) as pool:
                list(pool.map(lambda d: d.attachDeviceFlags(xml, FLAGS), subset))
            elapsed = time.perf_counter() - t0
            remove_all(subset, xml)
            return elapsed

        driver_round(doms[:1])  # untimed: os-brick's one-time import and setup is not fan-out
        for count in args.counts:
            subset = doms[:count]
            raw_times, driver_times, connect_counts = [], [], []
            for n in range(args.repeats):
                for side in ("raw", "driver") if n % 2 == 0 else ("driver", "raw"):
                    time.sleep(args.settle)
                    if side == "raw":
                        raw_times.append(raw_round(subset))
                    else:
                        elapsed, made = driver_round(subset)
                        driver_times.append(elapsed)
                        connect_counts.append(made)
            raw, ours = statistics.median(raw_times), statistics.median(driver_times)
            rows.append({"guests": count, "raw_s": round(raw, 4), "driver_s": round(ours, 4),
                         "ratio": round(ours / raw, 2), "host_connects": max(connect_counts),
                         "repeats": args.repeats})
        driver.close()
    if args.json:
        print(json.dumps(rows))
    else:
        print(f"{'guests':>7}{'raw libvirt (s)':>17}{'virtdriver (s)':>16}{'ratio':>8}"
              f"{'host connects':>15}")
        for r in rows:
            print(f"{r['guests']:>7}{r['raw_s']:>17.3f}{r['driver_s']:>16.3f}{r['ratio']:>8.2f}"
                  f"{r['host_connects']:>15}")
    plot(rows, Path(args.png))


def plot(rows: list[dict], png: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no plot: install the 'bench' extra for matplotlib)", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    counts = [r["guests"] for r in rows]
    ax.plot(counts, [r["raw_s"] for r in rows], "o-", label="raw libvirt, parallel")
    ax.plot(counts, [r["driver_s"] for r in rows], "s-", label="virtdriver attach_volume_to_many")
    ax.set_xlabel("guests")
    ax.set_ylabel("seconds to attach to all")
    ax.set_title("Fan-out of one multiattach volume")
    ax.set_xticks(counts)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    print(f"plot: {png}", file=sys.stderr)


if __name__ == "__main__":
    main()
