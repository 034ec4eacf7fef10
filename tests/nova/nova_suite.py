"""Run nova 34's own libvirt volume-driver tests against virtdriver's adapters.

Run inside a venv holding nova 34.0.0, its test dependencies and virtdriver (see
``scripts/nova-suite.sh``). Each nova test module reads the driver class through the nova module
it imported (``iscsi.LibvirtISCSIVolumeDriver(...)``); in every test module that name is swapped
for a proxy of that nova module whose class attributes are the adapters of
:data:`virtdriver.nova.NOVA_DRIVER_CLASSES`. nova's own modules are left untouched: its classes
call ``super(TheirName, self)`` through their module, and an adapter subclasses the class it
replaces, so swapping the name there would make those calls recurse.

Prints the failing tests, then one closing line ``N passed, M failed``; exits 1 when fewer than
``--min-passed`` tests passed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import types
import unittest
from pathlib import Path
from typing import Any

PACKAGE = "nova.tests.unit.virt.libvirt.volume"


class AdapterModule(types.ModuleType):
    """A nova module as a test sees it: adapters in place of nova's classes, the rest forwarded
    (reads, and the writes ``mock.patch.object`` makes, reach the real module)."""

    def __init__(self, real: types.ModuleType, adapters: dict[str, type]) -> None:
        super().__init__(real.__name__, real.__doc__)
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_adapters", adapters)

    def __getattribute__(self, name: str) -> Any:
        adapters = object.__getattribute__(self, "_adapters")
        if name in adapters:
            return adapters[name]
        if name in ("_real", "_adapters", "__class__"):
            return object.__getattribute__(self, name)
        return getattr(object.__getattribute__(self, "_real"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_real"), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(object.__getattribute__(self, "_real"), name)


def adapters_by_module() -> dict[str, dict[str, type]]:
    from virtdriver.nova import NOVA_DRIVER_CLASSES

    by_module: dict[str, dict[str, type]] = {}
    for path, adapter in NOVA_DRIVER_CLASSES.items():
        module, _, name = path.rpartition(".")
        by_module.setdefault(module, {})[name] = adapter
    return by_module


def check_coverage() -> list[str]:
    """Problems with the adapter table: a nova volume type without an adapter, or an adapter
    whose ``get_config`` is not virtdriver's rendering."""
    from nova.virt.libvirt.driver import VOLUME_DRIVERS

    from virtdriver.nova import NOVA_DRIVER_CLASSES, VirtdriverRendering

    problems = [f"nova volume type {kind!r} ({path}) has no adapter"
                for kind, path in sorted(VOLUME_DRIVERS.items())
                if kind != "fake" and path not in NOVA_DRIVER_CLASSES]
    problems += [f"{cls.__name__}.get_config is not virtdriver's"
                 for cls in NOVA_DRIVER_CLASSES.values()
                 if cls.get_config is not VirtdriverRendering.get_config]
    return problems


def swap_into_tests(suite_modules: list[types.ModuleType]) -> int:
    """Point every test module's nova volume modules at :class:`AdapterModule`s."""
    by_module = adapters_by_module()
    swapped = 0
    for test_module in suite_modules:
        for var, value in list(vars(test_module).items()):
            if isinstance(value, types.ModuleType) and value.__name__ in by_module \
                    and not isinstance(value, AdapterModule):
                setattr(test_module, var, AdapterModule(value, by_module[value.__name__]))
                swapped += 1
    return swapped


class CountingResult(unittest.TextTestResult):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.passed: list[str] = []

    def addSuccess(self, test: unittest.TestCase) -> None:  # noqa: N802 (unittest's name)
        super().addSuccess(test)
        self.passed.append(test.id())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-passed", type=int, default=0)
    parser.add_argument("--nova-only", action="store_true",
                        help="run the tests against nova's own drivers (baseline)")
    parser.add_argument("-k", dest="pattern", default=None, help="only tests whose id has this")
    parser.add_argument("-v", dest="verbosity", action="store_const", const=2, default=1)
    args = parser.parse_args(argv)
    # nova logs to stdout as its thread pools shut down: that goes to stderr, the result lines to
    # the real stdout (os.write: eventlet's file objects refuse a pipe).
    out = os.dup(1)
    os.dup2(2, 1)

    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        os.write(out, (line + "\n").encode())

    if args.nova_only:  # the baseline: kept by its inputs (baseline.py)
        import baseline

        kept = baseline.key("unit", args.pattern or "")
        report = baseline.load(kept)
        if report:
            for line in report["lines"]:
                say(line)
            say(f"nova-suite: nova's own drivers' results kept from an earlier run ({kept})")
            return 0 if report["ok"] else 1
    problems = [] if args.nova_only else check_coverage()
    for problem in problems:
        say(f"nova-suite: {problem}")
    package = importlib.import_module(PACKAGE)
    top = Path(package.__file__).parents[len(PACKAGE.split("."))]
    loader = unittest.TestLoader()
    suite = loader.discover(str(Path(package.__file__).parent), top_level_dir=str(top))
    modules = [m for name, m in sorted(sys.modules.items()) if name.startswith(PACKAGE + ".")]
    if not args.nova_only:
        swapped = swap_into_tests(modules)
        print(f"nova-suite: adapters swapped into {swapped} module references in "
              f"{len(modules)} test modules", file=sys.stderr)
    if args.pattern:
        suite = unittest.TestSuite(t for t in _flatten(suite) if args.pattern in t.id())
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=args.verbosity,
                                     resultclass=CountingResult)
    result = runner.run(suite)
    failed = [t.id() for t, _ in result.failures + result.errors + result.unexpectedSuccesses]
    for test_id in sorted(failed):
        say(f"FAILED {test_id}")
    say(f"{len(result.passed)} passed, {len(failed)} failed"
        + (" (nova's own drivers)" if args.nova_only else " (virtdriver's adapters)"))
    ok = len(result.passed) >= args.min_passed and not _load_errors(failed) and not problems
    if args.nova_only:
        baseline.store(kept, {"lines": said, "ok": ok})
    return 0 if ok else 1


def _flatten(suite: unittest.TestSuite) -> list[unittest.TestCase]:
    tests: list[unittest.TestCase] = []
    for item in suite:
        tests.extend(_flatten(item) if isinstance(item, unittest.TestSuite) else [item])
    return tests


def _load_errors(failed: list[str]) -> bool:
    return any(t.startswith("unittest.loader.") for t in failed)


if __name__ == "__main__":
    sys.exit(main())
