"""nova 34's libvirt driver unit tests of volumes, with nova's ``LibvirtDriver`` replaced by
virtdriver's subclass and virtdriver's adapters in place of nova's volume drivers.

``--driver virtdriver``: in ``nova.tests.unit.virt.libvirt.test_driver`` the module reference
``libvirt_driver`` (nova's ``nova.virt.libvirt.driver``) becomes a proxy of that module whose
``LibvirtDriver`` is :class:`virtdriver.nova.LibvirtDriver` (nova's module itself is untouched,
see ``nova_suite.AdapterModule``), and the test module's references to nova's volume modules
become proxies whose classes are the adapters. Every construction of virtdriver's class is
counted, so a swap that silently does nothing fails the run. ``--driver nova``: the same tests
untouched (the baseline). ``--driver both`` runs the two in parallel and compares
(:mod:`functional_compare`). The selection is :mod:`driver_selection`.
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
from unittest import mock

import nova.tests.unit  # noqa: F401  first: nova's eventlet monkey patching  isort:skip

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import driver_selection as selection  # noqa: E402
from results import RecordingResult, flatten, summary  # noqa: E402

SET = "test_driver"
BUILT: dict[str, int] = {}
_current = [""]


def swap_driver(test_module: Any) -> None:
    """virtdriver's ``LibvirtDriver`` and adapters wherever ``test_module`` reads nova's."""
    from nova_suite import AdapterModule, swap_into_tests

    import virtdriver.nova

    real_init = virtdriver.nova.LibvirtDriver.__init__

    def counting_init(self: Any, *args: Any, **kwargs: Any) -> None:
        BUILT[_current[0]] = BUILT.get(_current[0], 0) + 1
        real_init(self, *args, **kwargs)

    virtdriver.nova.LibvirtDriver.__init__ = counting_init  # type: ignore[method-assign]
    test_module.libvirt_driver = AdapterModule(test_module.libvirt_driver,
                                               {"LibvirtDriver": virtdriver.nova.LibvirtDriver})
    swap_into_tests([test_module])


#: how the tests name nova's class in ``mock.patch('...LibvirtDriver.method')``
NOVA_CLASS_NAMES = ("nova.virt.libvirt.driver.LibvirtDriver", "nova.virt.libvirt.LibvirtDriver")


def redirect_patch_targets(cls: type) -> None:
    """``mock.patch('nova.virt.libvirt.driver.LibvirtDriver.X')`` patches ``cls.X``: the class
    the tests construct, as ``libvirt_driver.LibvirtDriver`` already is for them. A method
    virtdriver overrides would otherwise hide the test's mock (nova's own attribute patched,
    the subclass's used)."""
    real = mock._get_target

    def get_target(target: str) -> Any:
        owner, _, attribute = target.rpartition(".")
        if owner in NOVA_CLASS_NAMES:
            return (lambda: cls), attribute
        return real(target)

    mock._get_target = get_target  # type: ignore[attr-defined]


def load(pattern: str | None) -> list[unittest.TestCase]:
    import importlib

    module = importlib.import_module(selection.MODULE)
    functions = selection.selected_functions()
    tests = flatten(unittest.TestLoader().loadTestsFromModule(module))
    return [t for t in tests if selection.is_selected(t._testMethodName, functions)
            and (pattern is None or pattern in t.id())]


def run_one(driver: str, pattern: str | None, verbosity: int) -> dict[str, Any]:
    import importlib

    if driver == "virtdriver":
        import virtdriver.nova

        # before the test module is imported: its @mock.patch decorators resolve then
        redirect_patch_targets(virtdriver.nova.LibvirtDriver)
    tests = load(pattern)
    if driver == "virtdriver":
        swap_driver(importlib.import_module(selection.MODULE))

    def on_start(test_id: str) -> None:
        _current[0] = test_id

    RecordingResult.on_start = staticmethod(on_start)
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=verbosity,
                                     resultclass=RecordingResult)
    started = time.monotonic()
    result = runner.run(unittest.TestSuite(tests))
    for test_id, outcome in result.outcomes.items():
        outcome["adapter_disks"] = BUILT.get(test_id, 0)  # here: virtdriver drivers built
    return {"driver": driver, "sets": {SET: {"seconds": round(time.monotonic() - started, 1),
                                             "tests": result.outcomes}}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver", choices=("nova", "virtdriver", "both"), default="both")
    parser.add_argument("-k", dest="pattern", default=None, help="only tests whose id has this")
    parser.add_argument("--json", dest="json_path", default=None)
    parser.add_argument("-v", dest="verbosity", action="store_const", const=2, default=1)
    args = parser.parse_args(argv)
    if args.driver == "both":
        return run_both(args)
    out = os.dup(1)
    os.dup2(2, 1)
    report = run_one(args.driver, args.pattern, args.verbosity)
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report, indent=1, sort_keys=True))
    data = report["sets"][SET]
    os.write(out, f"{SET} ({args.driver}): {summary(data['tests'])} ({data['seconds']} s)\n"
             .encode())
    return 0


def run_both(args: argparse.Namespace) -> int:
    import baseline
    import functional_compare as compare

    kept = baseline.key("driver", args.pattern or "")
    reports = {}
    nova_report = baseline.load(kept)
    if nova_report:
        print(f"driver-suite: nova's driver's results kept from an earlier run ({kept})")
        reports["nova"] = nova_report
    with tempfile.TemporaryDirectory() as tmp:
        procs = {}
        for driver in ("virtdriver",) if nova_report else ("virtdriver", "nova"):
            out = Path(tmp) / f"{driver}.json"
            cmd = [sys.executable, str(Path(__file__).resolve()), "--driver", driver,
                   "--json", str(out)] + (["-k", args.pattern] if args.pattern else [])
            procs[driver] = (subprocess.Popen(cmd, stdout=subprocess.DEVNULL), out)
        for driver, (proc, out) in procs.items():
            proc.wait()
            if not out.exists():
                print(f"driver-suite: the {driver} run wrote no results (exit {proc.returncode})")
                return 1
            reports[driver] = json.loads(out.read_text())
    if not nova_report:
        baseline.store(kept, reports["nova"])
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(reports, indent=1, sort_keys=True))
    return compare.report(reports["virtdriver"], reports["nova"], summary,
                          rendered="tests built virtdriver's LibvirtDriver")


if __name__ == "__main__":
    sys.exit(main())
