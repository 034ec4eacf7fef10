"""Live migration with a shared volume: the driver's migrate() against raw libvirt calls.

    .venv/bin/python benchmarks/bench_migrate.py [--rounds 3]

Two libvirt daemons on this machine: the host's, and a private one in its own mount namespace
with its own host UUID (``testhosts.guests.private_libvirtd``). Guest A has a multiattach
``local`` volume (a loop device) read-write, guest B on the source the same volume read-only.
Raw: ``migrate3`` of A with the same flags and its own XML, nothing prepared or released.
Driver: ``LibvirtVolumeDriver.migrate`` (prepare on the destination, the disks rendered for it,
``migrate3``, finish on the source). Each round migrates A there and back with each method,
alternating. Reported: the median total time of the call, and the guest's downtime as libvirt
measured it (the completed job's ``downtime`` on the destination), with their ratios.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import libvirt

# testhosts/ is not installed: it comes from the checkout this script is in
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testhosts.guests import Guests, LoopDevice, open_connection
from testhosts.guests.private_libvirtd import PrivateLibvirtd
from virtdriver import LibvirtVolumeDriver

FLAGS = (libvirt.VIR_MIGRATE_LIVE | libvirt.VIR_MIGRATE_PERSIST_DEST
         | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE)


def free_uri() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{probe.getsockname()[1]}"


def downtime_ms(dom: libvirt.virDomain) -> float:
    stats = dom.jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED)
    return float(stats.get("downtime", float("nan")))


def raw_move(src: libvirt.virConnect, dst: libvirt.virConnect, name: str) -> tuple[float, float]:
    dom = src.lookupByName(name)
    start = time.perf_counter()
    moved = dom.migrate3(dst, {libvirt.VIR_MIGRATE_PARAM_URI: free_uri()}, FLAGS)
    return time.perf_counter() - start, downtime_ms(moved)


def driver_move(src: LibvirtVolumeDriver, dst: LibvirtVolumeDriver, name: str,
                info: dict) -> tuple[float, float]:
    start = time.perf_counter()
    src.migrate(name, dst, [info], uri=free_uri())
    elapsed = time.perf_counter() - start
    return elapsed, downtime_ms(dst.connection.get().lookupByName(name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    times: dict[str, list[float]] = {"raw": [], "driver": []}
    downs: dict[str, list[float]] = {"raw": [], "driver": []}
    with PrivateLibvirtd(host_uuid=str(uuid.uuid4())) as daemon, \
            tempfile.TemporaryDirectory() as state, LoopDevice(64 << 20) as loop:
        host_a, host_b = open_connection("qemu:///system"), open_connection(daemon.uri)
        drivers = [LibvirtVolumeDriver("qemu:///system", state_dir=f"{state}/a"),
                   LibvirtVolumeDriver(daemon.uri, state_dir=f"{state}/b")]
        with Guests(host_a) as guests, Guests(host_b) as far:
            a, b = guests.start("bench-a"), guests.start("bench-b")
            far.adopt(a.name())
            vid = str(uuid.uuid4())
            info = {"driver_volume_type": "local", "multiattach": True, "serial": vid,
                    "data": {"volume_id": vid, "device_path": loop.device}}
            drivers[0].attach_volume(info, a.name())
            drivers[0].attach_volume(info, b.name(), attach_mode="ro")
            conns = [host_a, host_b]
            here = 0
            for _ in range(args.rounds):
                for method in ("raw", "driver") if len(times["raw"]) % 2 == 0 else \
                        ("driver", "raw"):
                    for _leg in range(2):  # there and back: each method ends where it began
                        if method == "raw":
                            took, down = raw_move(conns[here], conns[1 - here], a.name())
                        else:
                            took, down = driver_move(drivers[here], drivers[1 - here], a.name(),
                                                     info)
                        here = 1 - here
                        times[method].append(took)
                        downs[method].append(down)
            drivers[here].detach_volume(a.name(), vid)
            drivers[0].detach_volume(b.name(), vid)
        for driver in drivers:
            driver.close()
    result = {m: {"total_s": statistics.median(times[m]),
                  "downtime_ms": statistics.median(downs[m]),
                  "n": len(times[m])} for m in times}
    result["ratio_total"] = result["driver"]["total_s"] / result["raw"]["total_s"]
    result["ratio_downtime"] = result["driver"]["downtime_ms"] / result["raw"]["downtime_ms"]
    if args.json:
        print(json.dumps(result))
        return
    for m in ("raw", "driver"):
        print(f"{m:7s} total {result[m]['total_s']:.2f} s  "
              f"downtime {result[m]['downtime_ms']:.0f} ms"
              f"  ({result[m]['n']} migrations)")
    print(f"driver/raw: total {result['ratio_total']:.2f}x, "
          f"downtime {result['ratio_downtime']:.2f}x")


if __name__ == "__main__":
    main()
