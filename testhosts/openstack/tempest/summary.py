"""Summarize a tempest run's subunit stream: summary.py FILE.subunit [--expect tests.txt]

One line per test (status, seconds, and for a skip tempest's own reason, for a failure the last
line of its traceback), then `N passed, M skipped, K failed`. Exits 1 when a test failed or
errored, when nothing ran, or (with --expect) when a test of the list has no result: a class
whose setup fails reports no test of its own, only a `setUpClass` error, so a missing result is
a failure too. Run it with tempest's venv python (python-subunit, testtools).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import subunit
import testtools

ATTRS = re.compile(r"\[.*\]$")
# a class-level skip or error (tempest's skip_checks, resource_setup) has this id
CLASS_LEVEL = re.compile(r"^(?:setUpClass|tearDownClass) \((.+)\)$")


def results(stream: Path) -> list[dict]:
    tests: list[dict] = []
    with stream.open("rb") as handle:
        case = subunit.ByteStreamToStreamResult(handle, non_subunit_name="stdout")
        result = testtools.StreamToDict(tests.append)
        result.startTestRun()
        case.run(result)
        result.stopTestRun()
    return tests


def detail_text(test: dict, name: str) -> str:
    content = test["details"].get(name)
    if content is None:
        return ""
    return b"".join(content.iter_bytes()).decode(errors="replace").strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("subunit", type=Path)
    parser.add_argument("--expect", type=Path, help="test ids that must each have a result")
    args = parser.parse_args(argv)
    tests = [t for t in results(args.subunit) if t["status"] not in (None, "exists")]
    counts = {"passed": 0, "skipped": 0, "failed": 0}
    seen: set[str] = set()
    classes: set[str] = set()
    for test in sorted(tests, key=lambda t: t["id"]):
        name = ATTRS.sub("", test["id"])
        seen.add(name)
        whole_class = CLASS_LEVEL.match(name)
        if whole_class:
            classes.add(whole_class.group(1) + ".")
        start, end = (test["timestamps"] + [None, None])[:2]
        seconds = f"{(end - start).total_seconds():6.1f}s" if start and end else "      ?"
        status = test["status"]
        if status == "success":
            counts["passed"] += 1
            print(f"  passed  {seconds}  {name}")
        elif status == "skip":
            counts["skipped"] += 1
            print(f"  skipped {seconds}  {name}\n                    reason: "
                  f"{detail_text(test, 'reason') or '?'}")
        else:
            counts["failed"] += 1
            trace = detail_text(test, "traceback").splitlines()
            print(f"  {status.upper():7} {seconds}  {name}\n                    "
                  f"{trace[-1] if trace else '(no traceback)'}")
    missing = []
    if args.expect:
        wanted = [line.strip() for line in args.expect.read_text().splitlines()
                  if line.strip() and not line.startswith("#")]
        missing = [name for name in wanted if name not in seen
                   and not any(name.startswith(prefix) for prefix in classes)]
        for name in missing:
            print(f"  NO RESULT         {name}")
    print(f"{counts['passed']} passed, {counts['skipped']} skipped, {counts['failed']} failed"
          + (f", {len(missing)} without a result" if missing else ""))
    return 1 if counts["failed"] or missing or not tests else 0


if __name__ == "__main__":
    sys.exit(main())
