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
import cProfile
import io
import json
import pstats
import statistics
import sys
from pathlib import Path
from typing import Any

# testhosts/ is not installed: it comes from the checkout this script is in
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import (  # noqa: E402
    LOCAL_CALLS,
    LibvirtCalls,
    attach_host,
    file_volume,
    round_trips,
    timed,  # noqa: E402
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--guests", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    with attach_host("prof") as host, LibvirtCalls().installed() as counter:
        conn, driver, image = host.conn, host.driver, host.image
        for count in sorted(set(args.guests)):
            dom = host.grow(count)
            per_op: dict[str, dict[str, list[float]]] = {"attach": {}, "detach": {}}
            cpu: dict[str, list[float]] = {"attach": [], "detach": []}
            profile = cProfile.Profile()
            for _ in range(args.rounds):
                info = file_volume(image)
                for op, call in (("attach", lambda info=info, dom=dom: driver.attach_volume(
                                     info, dom.name())),
                                 ("detach", lambda info=info, dom=dom: driver.detach_volume(
                                     dom.name(), info["data"]["volume_id"]))):
                    counter.into = per_op[op]
                    if args.profile and op == "attach":
                        profile.enable()
                    cpu[op].append(timed(call)[1])
                    profile.disable()
                    counter.into = None
            row: dict[str, Any] = {"guests": count, "domains": len(conn.listAllDomains())}
            for op in ("attach", "detach"):
                calls = per_op[op]
                row[f"{op}_cpu_ms"] = round(statistics.median(cpu[op]) * 1000, 2)
                row[f"{op}_round_trips"] = round(round_trips(calls) / args.rounds, 1)
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
                        where = "  (local)" if name in LOCAL_CALLS else ""
                        print(f"    {name:36s} {c['per_op']:6.1f} x  median {c['median_ms']} "
                              f"ms{where}")
                if args.profile:
                    out = io.StringIO()
                    pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(
                        "virtdriver", 25)
                    print(out.getvalue())
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
