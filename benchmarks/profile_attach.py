"""Where an attach and a detach spend their time: libvirt calls, CPU, and a profile.

    .venv/bin/python benchmarks/profile_attach.py [--guests 1 32] [--rounds 10] [--profile]

For each guest count (every guest with a volume of its own, as in bench_attach.py): the libvirt
calls one ``attach_volume`` and one ``detach_volume`` make (counted per method, with their median
duration; the round trips to libvirtd apart from what the client library answers itself), the
CPU time of the calling thread (what the driver itself costs, waits excluded), and
with ``--profile`` the top of a cProfile of the attaches. What other users of the host run shows
up in the durations, not in the counts.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import functools
import io
import json
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import libvirt

# testhosts/ is not installed: it comes from the checkout this script is in
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from virtdriver import LibvirtVolumeDriver
from testhosts.guests import Guests, open_connection, sparse_file

Calls = dict[str, list[float]]
# Answered by the client library from what it holds: no round trip to libvirtd.
LOCAL = {"virDomain.UUIDString", "virDomain.UUID", "virDomain.name", "virDomain.ID",
         "virDomain.connect", "virConnect.isAlive"}


def count_calls(calls: Calls, active: list[bool]) -> None:
    """Count every public method of virDomain and virConnect (while ``active[0]``)."""
    for cls in (libvirt.virDomain, libvirt.virConnect):
        for name in dir(cls):
            method = getattr(cls, name)
            if name.startswith("_") or not callable(method):
                continue

            @functools.wraps(method)
            def counted(*args: Any, _m: Callable[..., Any] = method,
                        _n: str = f"{cls.__name__}.{name}", **kwargs: Any) -> Any:
                start = time.perf_counter()
                try:
                    return _m(*args, **kwargs)
                finally:
                    if active[0]:
                        calls[_n].append(time.perf_counter() - start)

            setattr(cls, name, counted)


def volume(image: Path) -> dict:
    vid = str(uuid.uuid4())
    return {"driver_volume_type": "gpfs", "serial": vid, "multiattach": True,
            "data": {"volume_id": vid, "device_path": str(image)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--guests", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    conn = open_connection("qemu:///system")
    rows = []
    with tempfile.TemporaryDirectory() as tmp, Guests(conn, memory_mib=64) as guests:
        driver = LibvirtVolumeDriver("qemu:///system", state_dir=Path(tmp) / "state")
        image = sparse_file(Path(tmp) / "profile.raw")
        doms: list[libvirt.virDomain] = []

        def start(i: int) -> libvirt.virDomain:
            dom = guests.start(f"prof{i}")
            driver.attach_volume(volume(sparse_file(Path(tmp) / f"own{i}.raw")), dom.name())
            return dom

        active = [False]
        per_op: dict[str, Calls] = {"attach": collections.defaultdict(list),
                                    "detach": collections.defaultdict(list)}
        current: list[Calls] = [per_op["attach"]]

        class Route(dict):  # calls land in the operation being measured
            def __missing__(self, key: str) -> list[float]:
                return current[0][key]

        count_calls(Route(), active)  # type: ignore[arg-type]
        for count in sorted(set(args.guests)):
            with ThreadPoolExecutor(4) as pool:
                doms += list(pool.map(start, range(len(doms), count)))
            warm = volume(image)
            driver.attach_volume(warm, doms[0].name())
            driver.detach_volume(doms[0].name(), warm["data"]["volume_id"])
            per_op = {"attach": collections.defaultdict(list),
                      "detach": collections.defaultdict(list)}
            cpu: dict[str, list[float]] = {"attach": [], "detach": []}
            profile = cProfile.Profile()
            for _ in range(args.rounds):
                info = volume(image)
                for op, call in (("attach", lambda: driver.attach_volume(info, doms[0].name())),
                                 ("detach", lambda: driver.detach_volume(
                                     doms[0].name(), info["data"]["volume_id"]))):
                    current[0] = per_op[op]
                    active[0] = True
                    if args.profile and op == "attach":
                        profile.enable()
                    started = time.thread_time()
                    call()
                    cpu[op].append(time.thread_time() - started)
                    profile.disable()
                    active[0] = False
            row: dict[str, Any] = {"guests": count, "domains": len(conn.listAllDomains())}
            for op in ("attach", "detach"):
                calls = per_op[op]
                row[f"{op}_cpu_ms"] = round(statistics.median(cpu[op]) * 1000, 2)
                row[f"{op}_round_trips"] = round(sum(len(v) for n, v in calls.items()
                                                     if n not in LOCAL) / args.rounds, 1)
                row[f"{op}_calls"] = {name: {"per_op": round(len(v) / args.rounds, 1),
                                             "median_ms": round(statistics.median(v) * 1000, 3)}
                                      for name, v in sorted(calls.items(),
                                                            key=lambda kv: -len(kv[1]))}
            rows.append(row)
            if not args.json:
                print(f"{count} guest(s), {row['domains']} domains on the host, "
                      f"{args.rounds} rounds:")
                for op in ("attach", "detach"):
                    print(f"  {op}: CPU {row[op + '_cpu_ms']} ms (median), "
                          f"{row[op + '_round_trips']} round trips to libvirtd:")
                    for name, c in row[f"{op}_calls"].items():
                        where = "  (local)" if name in LOCAL else ""
                        print(f"    {name:36s} {c['per_op']:6.1f} x  median {c['median_ms']} "
                              f"ms{where}")
                if args.profile:
                    out = io.StringIO()
                    pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(
                        "virtdriver", 25)
                    print(out.getvalue())
        driver.close()
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
