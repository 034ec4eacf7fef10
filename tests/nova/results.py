"""Per-test outcomes and the ``N passed, M failed`` line of the nova suites run with unittest."""

from __future__ import annotations

import time
import unittest
from collections.abc import Callable
from typing import Any


class RecordingResult(unittest.TextTestResult):
    """Every test's outcome and duration; tells the switch which test is running."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outcomes: dict[str, dict[str, Any]] = {}
        self._started = 0.0

    #: called with each test's id as it starts (the functional switch counts per test).
    on_start: Callable[[str], None] = staticmethod(lambda _test_id: None)

    def startTest(self, test: unittest.TestCase) -> None:  # noqa: N802 (unittest's name)
        self.on_start(test.id())
        self._started = time.monotonic()
        super().startTest(test)

    def _record(self, test: unittest.TestCase, outcome: str) -> None:
        self.outcomes[test.id()] = {"outcome": outcome,
                                    "seconds": round(time.monotonic() - self._started, 2)}

    def addSuccess(self, test: unittest.TestCase) -> None:  # noqa: N802
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        super().addFailure(test, err)
        self._record(test, "failed")

    def addError(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        super().addError(test, err)
        self._record(test, "failed")

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:  # noqa: N802
        super().addSkip(test, reason)
        self._record(test, "skipped")

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        super().addExpectedFailure(test, err)
        self._record(test, "passed")

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:  # noqa: N802
        super().addUnexpectedSuccess(test)
        self._record(test, "failed")


def flatten(suite: unittest.TestSuite) -> list[unittest.TestCase]:
    tests: list[unittest.TestCase] = []
    for item in suite:
        tests.extend(flatten(item) if isinstance(item, unittest.TestSuite) else [item])
    return tests


def summary(tests: dict[str, dict[str, Any]]) -> str:
    passed = sum(1 for t in tests.values() if t["outcome"] == "passed")
    failed = sum(1 for t in tests.values() if t["outcome"] == "failed")
    skipped = len(tests) - passed - failed
    return f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else "")
