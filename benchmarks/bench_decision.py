"""Cost of the "is this volume still used on this host?" decision as the host fills up.

    .venv/bin/python benchmarks/bench_decision.py [--counts 1 2 4 8 16 32 64]

The answer comes from libvirt's live state, through its API: the list of domains and every
domain's live and persistent XML as libvirt has it now; only the domains whose XML can hold the
volume or its data are parsed. Each guest has the shared volume attached (all of them
match: the worst case for parsing) and a volume of its own. The time is the median of the
decision as detach takes it (``Host.users(volume, data)``: the read, the parse, the arrivals by
migration), measured once the guests are idle (``timing.start_idle``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import libvirt

# testhosts/ is not installed: it comes from the checkout this script is in
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import start_idle  # noqa: E402

from testhosts.guests import Guests, open_connection, sparse_file
from virtdriver import LibvirtVolumeDriver
from virtdriver.hypervisor.dataid import path_identity


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    conn = open_connection("qemu:///system")
    rows = []
    with tempfile.TemporaryDirectory() as tmp, Guests(conn, memory_mib=96) as guests:
        image = sparse_file(Path(tmp) / "shared.raw")
        driver = LibvirtVolumeDriver("qemu:///system", state_dir=Path(tmp) / "state")
        vid = str(uuid.uuid4())
        info = {"driver_volume_type": "gpfs", "serial": vid, "multiattach": True,
                "data": {"volume_id": vid, "device_path": str(image)}}
        doms: list = []
        for count in sorted(args.counts):
            def start(i: int) -> libvirt.virDomain:
                dom = guests.start(f"dec{i}")
                own = str(uuid.uuid4())
                driver.attach_volume({"driver_volume_type": "gpfs", "serial": own, "data": {
                    "volume_id": own, "device_path": str(sparse_file(Path(tmp) / f"{i}.raw"))}},
                    dom.name())
                return dom

            new = start_idle(conn, start, range(len(doms), count))
            if new:
                driver.attach_volume_to_many(info, [d.name() for d in new])
            doms += new
            samples = []
            data = path_identity(str(image))
            for _ in range(args.calls):
                t0 = time.perf_counter()
                users = driver.compute_host.users(vid, data)
                samples.append(time.perf_counter() - t0)
            assert len({u.guest_uuid for u in users}) == count
            rows.append({"guests": count, "decision_ms": round(statistics.median(samples) * 1000,
                                                               2)})
        driver.close()
    if args.json:
        print(json.dumps(rows))
        return
    print(f"{'guests':>7}{'decision (ms)':>15}")
    for r in rows:
        print(f"{r['guests']:>7}{r['decision_ms']:>15.2f}")


if __name__ == "__main__":
    main()
