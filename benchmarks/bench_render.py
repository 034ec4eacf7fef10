"""Render throughput: ``build_disk(...).to_xml()`` against nova 34, in one run.

    .venv/bin/python benchmarks/bench_render.py [--nova-python PYTHON] [--rounds 3]

The disk is a multiattach read-only iSCSI volume with QoS, discard and a SCSI unit. Nova runs in
its own venv (``benchmarks/setup-nova-venv.sh``) through ``benchmarks/nova_render.py``; the two
sides alternate, round by round, so machine noise hits both alike. Without nova's venv only
virtdriver's figure is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from nova_render import CONNECTION_INFO  # noqa: E402
from timing import best_rate  # noqa: E402

from virtdriver import build_disk  # noqa: E402

NOVA_PYTHONS = ("/var/tmp/nova-venv/bin/python", "/var/tmp/virtdriver-nova-34.0.0/bin/python")


def default_nova_python() -> str:
    found = os.environ.get("NOVA_PYTHON") or next(
        (p for p in NOVA_PYTHONS if Path(p).exists()), NOVA_PYTHONS[0])
    return found


def virtdriver_rate(seconds: float, windows: int) -> float:
    def render() -> str:
        return build_disk(CONNECTION_INFO, attach_mode="ro", target_dev="sdb", bus="scsi",
                          scsi_unit=3).to_xml()

    return best_rate(render, seconds, windows)


def nova_rate(python: str, seconds: float, windows: int) -> tuple[float, str]:
    done = subprocess.run([python, str(HERE / "nova_render.py"), "--seconds", str(seconds),
                           "--windows", str(windows)], capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return float(result["disks_per_s"]), str(result["nova_version"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nova-python", default=default_nova_python(),
                        help="python of a venv with nova 34 (default: $NOVA_PYTHON, else "
                             "setup-nova-venv.sh's venv, else the one scripts/nova-suite.sh "
                             "makes); 'none' skips nova")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args()
    have_nova = args.nova_python != "none" and Path(args.nova_python).exists()
    ours: list[float] = []
    theirs: list[float] = []
    nova_version = None
    for _ in range(args.rounds):
        if have_nova:
            rate, nova_version = nova_rate(args.nova_python, args.seconds, 3)
            theirs.append(rate)
        ours.append(virtdriver_rate(args.seconds, 3))
    result = {"virtdriver_disks_per_s": round(statistics.median(ours)),
              "nova_version": nova_version,
              "nova_disks_per_s": round(statistics.median(theirs)) if theirs else None,
              "ratio": round(statistics.median(ours) / statistics.median(theirs), 2)
              if theirs else None, "rounds": args.rounds}
    if args.json:
        print(json.dumps(result))
        return
    print(f"{'renderer':<22}{'disks/s (median of rounds)':>28}")
    print(f"{'virtdriver':<22}{result['virtdriver_disks_per_s']:>28,}")
    if theirs:
        print(f"{'nova ' + str(nova_version):<22}{result['nova_disks_per_s']:>28,}")
        print(f"virtdriver / nova = {result['ratio']}x")
    else:
        print(f"(nova not measured: {args.nova_python} missing; "
              "run benchmarks/setup-nova-venv.sh)")


if __name__ == "__main__":
    main()
