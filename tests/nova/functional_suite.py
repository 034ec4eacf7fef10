"""nova 34's functional tests of volumes, run through a chosen libvirt compute driver.

``--driver virtdriver`` runs them with ``compute_driver = virtdriver.nova.LibvirtDriver``,
``--driver nova`` with nova's own ``libvirt.LibvirtDriver`` (the baseline); ``--driver both``
runs each in its own process and compares (:mod:`functional_compare`). The switch is
:mod:`functional_switch`; the selection :mod:`functional_selection`. Run in the nova venv (see
``scripts/nova-suite.sh``); nova's test classes are testtools cases, run here with unittest.

One process per driver prints, per set, ``N passed, M failed`` and writes ``--json``: every
test's outcome, its seconds, and (virtdriver) how many disks virtdriver's adapters rendered.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from typing import Any

# First of all: nova's functional package applies eventlet's monkey patching on import, and
# nova's harness behaves differently when nova.test was imported before it (a guest then loses
# its network interface on power-on in test_device_bus_migration, for either driver).
import nova.tests.functional  # noqa: E402,F401  isort:skip

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import functional_selection as selection  # noqa: E402
import functional_switch as switch  # noqa: E402
from results import RecordingResult, flatten, summary  # noqa: E402


def load(sets: list[str], pattern: str | None,
         shard: tuple[int, int] = (0, 1)) -> dict[str, list[unittest.TestCase]]:
    """The selected tests by set; ``shard`` ``(i, n)`` keeps every n-th test class from the i-th
    (a class's tests stay together: they share its setUp cost and its fixtures' habits)."""
    loader = unittest.TestLoader()
    found = {}
    index, count = shard
    for which in sets:
        tests = flatten(loader.loadTestsFromNames(selection.modules(which)))
        tests = [t for t in tests if pattern is None or pattern in t.id()]
        classes = sorted({_class_of(t) for t in tests})
        mine = set(classes[index::count])
        found[which] = [t for t in tests if _class_of(t) in mine]
    return found


def _class_of(test: unittest.TestCase) -> str:
    return test.id().rpartition(".")[0]


def run_one(driver: str, sets: list[str], pattern: str | None, verbosity: int,
            shape: str, shard: tuple[int, int] = (0, 1)) -> dict[str, Any]:
    switch.install(driver, shape)
    by_set = load(sets, pattern, shard)
    report: dict[str, Any] = {"driver": driver, "shape": shape, "sets": {}}
    for which, tests in by_set.items():
        runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=verbosity,
                                         resultclass=RecordingResult)
        RecordingResult.on_start = staticmethod(switch.set_current_test)
        started = time.monotonic()
        result = runner.run(unittest.TestSuite(tests))
        for test_id, outcome in result.outcomes.items():
            outcome["adapter_disks"] = switch.COUNTS.get(test_id, 0)
            outcome["computes"] = switch.STARTED.get(test_id, 0)
        report["sets"][which] = {"seconds": round(time.monotonic() - started, 1),
                                 "tests": result.outcomes}
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver", choices=("nova", "virtdriver", "both"), default="both")
    parser.add_argument("--set", dest="sets", default=",".join(selection.SETS),
                        help="comma-separated: " + ", ".join(selection.SETS))
    parser.add_argument("--volume-type", dest="shape", choices=sorted(switch.SHAPES),
                        default="rbd", help="the Cinder document nova's fake volumes become")
    parser.add_argument("-k", dest="pattern", default=None, help="only tests whose id has this")
    parser.add_argument("--json", dest="json_path", default=None)
    parser.add_argument("--jobs", type=int, default=4,
                        help="with --driver both: processes at a time (each driver's tests are "
                             "split into jobs/2 shards; nova's tests mostly wait)")
    parser.add_argument("--shard", default="0/1", help="I/N: this process runs shard I of N")
    parser.add_argument("-v", dest="verbosity", action="store_const", const=2, default=1)
    args = parser.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    if args.driver == "both":
        return run_both(args, sets)
    # nova's services log to stdout as they shut down (even at exit): all of it goes to stderr,
    # the summary lines to the real stdout (written with os.write: eventlet's file objects
    # refuse a pipe or /dev/null).
    out = os.dup(1)
    os.dup2(2, 1)
    index, _, count = args.shard.partition("/")
    report = run_one(args.driver, sets, args.pattern, args.verbosity, args.shape,
                     (int(index), int(count)))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report, indent=1, sort_keys=True))
    for which, data in report["sets"].items():
        line = f"{which} ({args.driver}): {summary(data['tests'])} ({data['seconds']} s)\n"
        os.write(out, line.encode())
    return 0


def run_both(args: argparse.Namespace, sets: list[str]) -> int:
    """Both drivers, each split into shards run as separate processes, ``--jobs`` at a time."""
    import baseline
    import functional_compare as compare

    kept = baseline.key("functional", ",".join(sets), args.shape, args.pattern or "")
    nova_report = baseline.load(kept)
    drivers = ("virtdriver",) if nova_report else ("virtdriver", "nova")
    shards = max(1, args.jobs // len(drivers))  # nova's kept: virtdriver gets every job
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        commands = []
        for driver in drivers:
            for index in range(shards):
                out = Path(tmp) / f"{driver}-{index}.json"
                cmd = [sys.executable, str(Path(__file__).resolve()), "--driver", driver,
                       "--set", ",".join(sets), "--json", str(out), "--volume-type",
                       args.shape, "--shard", f"{index}/{shards}"]
                if args.pattern:
                    cmd += ["-k", args.pattern]
                commands.append((driver, out, cmd))
        running: list[tuple[str, Path, subprocess.Popen[bytes]]] = []
        for driver, out, cmd in commands:
            while len(running) >= max(1, args.jobs):
                running = _reap(running)
            running.append((driver, out, subprocess.Popen(cmd, stdout=subprocess.DEVNULL)))
        while running:
            running = _reap(running)
        reports: dict[str, Any] = {}
        for driver, out, _ in commands:
            if not out.exists():
                print(f"functional: a {driver} shard wrote no results ({out.name})")
                return 1
            _merge(reports.setdefault(driver, {"driver": driver, "sets": {}}),
                   json.loads(out.read_text()))
    print(f"functional: {len(commands)} processes, {args.jobs} at a time, "
          f"{time.monotonic() - started:.0f} s")
    if nova_report:
        print(f"functional: nova's driver's results kept from an earlier run ({kept})")
        reports["nova"] = nova_report
    else:
        baseline.store(kept, reports["nova"])
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(reports, indent=1, sort_keys=True))
    return compare.report(reports["virtdriver"], reports["nova"], summary)


def _reap(running: list[Any]) -> list[Any]:
    time.sleep(0.5)
    return [item for item in running if item[2].poll() is None]


def _merge(into: dict[str, Any], shard: dict[str, Any]) -> None:
    for which, data in shard["sets"].items():
        merged = into["sets"].setdefault(which, {"seconds": 0.0, "tests": {}})
        merged["seconds"] = round(merged["seconds"] + data["seconds"], 1)  # summed over shards
        merged["tests"].update(data["tests"])

if __name__ == "__main__":
    sys.exit(main())
