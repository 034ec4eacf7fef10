"""Run virtdriver's own nova test cases (testtools classes built on nova's test harness) with
unittest in the nova venv: ``python tests/nova/run_cases.py loader_cases``.

Prints the failing tests, then one closing line ``N passed, M failed``; exits 1 on any failure.
"""

from __future__ import annotations

import os
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nova_suite import CountingResult  # noqa: E402


def main(modules: list[str]) -> int:
    # nova's services log to stdout as they shut down: that goes to stderr, the result to the
    # real stdout (os.write: eventlet's file objects refuse a pipe).
    out = os.dup(1)
    os.dup2(2, 1)
    suite = unittest.defaultTestLoader.loadTestsFromNames(modules)
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2, resultclass=CountingResult)
    result = runner.run(suite)
    failed = sorted(t.id() for t, _ in result.failures + result.errors
                    + result.unexpectedSuccesses)
    lines = [f"FAILED {test_id}" for test_id in failed]
    lines.append(f"{len(result.passed)} passed, {len(failed)} failed")
    os.write(out, ("\n".join(lines) + "\n").encode())
    return 1 if failed or not result.passed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
