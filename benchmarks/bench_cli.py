"""Command-line cold start: the whole ``virtdriver`` process, wall clock, median of N runs.

    .venv/bin/python benchmarks/bench_cli.py [--runs 9]

Measured: ``virtdriver render FILE`` (a multiattach iSCSI volume), ``virtdriver list GUEST``
(an OS-less guest started for the purpose, with one volume attached: connecting to libvirt and
reading the guest included) and ``virtdriver --help``; and ``python -c pass`` for the
interpreter's own start on this machine. Each command runs in a fresh process, the commands
interleaved run by run so that machine noise hits them alike. Goal: at most 0.1 s each.

As installed: pip writes every module's bytecode when it installs a package, and Python writes it
on the first import of an editable install -- unless PYTHONDONTWRITEBYTECODE is set (as in some
sandboxes), which would make every start compile virtdriver's sources again (about 0.05 s more
here). So the package's bytecode is compiled first, as pip would.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FIXTURE = ROOT / "fixtures" / "connection_info" / "iscsi-multiattach.json"


def wall(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                          check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode(errors='replace')}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--no-list", action="store_true", help="skip 'list' (needs libvirtd)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    exe = str(Path(sys.executable).with_name("virtdriver"))
    commands = {"render": [exe, "render", str(FIXTURE)], "help": [exe, "--help"],
                "python": [sys.executable, "-c", "pass"]}
    import virtdriver

    package = str(Path(virtdriver.__file__).parent)
    subprocess.run([sys.executable, "-m", "compileall", "-q", package], check=True,
                   stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, VIRTDRIVER_STATE_DIR=str(Path(tmp) / "state"))
        guests = None
        if not args.no_list:
            from virtdriver import LibvirtVolumeDriver
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # testhosts/
            from testhosts.guests import Guests, open_connection, sparse_file

            guests = Guests(open_connection(), memory_mib=64)
            dom = guests.start("cli")
            vid = str(uuid.uuid4())
            driver = LibvirtVolumeDriver("qemu:///system", state_dir=Path(tmp) / "state")
            driver.attach_volume({"driver_volume_type": "gpfs", "serial": vid,
                                  "data": {"volume_id": vid, "device_path": str(
                                      sparse_file(Path(tmp) / "cli.raw"))}}, dom.name())
            driver.close()
            commands["list"] = [exe, "list", dom.name()]
        try:
            for argv in commands.values():  # untimed: warm the page cache
                wall(argv, env)
            times: dict[str, list[float]] = {name: [] for name in commands}
            for _ in range(args.runs):
                for name, argv in commands.items():
                    times[name].append(wall(argv, env))
        finally:
            if guests is not None:
                guests.close()
    result = {f"{name}_s": round(statistics.median(v), 4) for name, v in times.items()}
    result |= {f"{name}_min_s": round(min(v), 4) for name, v in times.items()}
    result["runs"] = args.runs
    if args.json:
        print(json.dumps(result))
        return
    print(f"{'command':<26}{'median (s)':>12}{'min (s)':>10}")
    labels = {"render": "virtdriver render FILE", "list": "virtdriver list GUEST",
              "help": "virtdriver --help", "python": "python -c pass"}
    for name in commands:
        print(f"{labels[name]:<26}{result[name + '_s']:>12.3f}{result[name + '_min_s']:>10.3f}")
    print(f"(whole processes, {args.runs} interleaved runs each)")


if __name__ == "__main__":
    main()
