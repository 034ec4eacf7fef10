"""virtdriver's results against nova's own driver's, set by set (issue #21, part 4).

A test that passes with nova's ``libvirt.LibvirtDriver`` must pass with
``virtdriver.nova.LibvirtDriver``, unless it is a deliberate difference listed in
:data:`DOCUMENTED` (and in docs/nova.md) with its reason. The virtdriver run must also really
render volumes: its adapters' ``get_config`` counts are summed per set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: test id -> why virtdriver deliberately fails it (the same list is in docs/nova.md). Empty:
#: every test that passes with nova's driver passes with virtdriver's.
DOCUMENTED: dict[str, str] = {}


def report(ours: dict[str, Any], nova: dict[str, Any],
           summary: Callable[[dict[str, Any]], str],
           rendered: str = "disks rendered by virtdriver's adapters") -> int:
    """Print each set's line and the differences; 1 when an undocumented one (or no sign of
    virtdriver at all: ``adapter_disks`` counts ``rendered``) is found."""
    problems = []
    for which, data in ours["sets"].items():
        tests = data["tests"]
        base = nova["sets"].get(which, {"tests": {}, "seconds": 0})
        disks = sum(t.get("adapter_disks", 0) for t in tests.values())
        count = sum(1 for t in tests.values() if t.get("adapter_disks", 0))
        print(f"{which}: virtdriver {summary(tests)} ({data['seconds']} s) | "
              f"nova {summary(base['tests'])} ({base['seconds']} s) | "
              f"{rendered}: {disks} in {count} tests")
        for test_id, outcome in sorted(base["tests"].items()):
            mine = tests.get(test_id, {"outcome": "missing"})["outcome"]
            if outcome["outcome"] == "passed" and mine != "passed":
                if test_id in DOCUMENTED:
                    print(f"  documented difference: {test_id}: {DOCUMENTED[test_id]}")
                else:
                    problems.append(f"{test_id} passes with nova's driver, {mine} with "
                                    "virtdriver's")
            elif outcome["outcome"] != "passed" and mine == "passed":
                print(f"  passes with virtdriver only: {test_id}")
        for test_id, outcome in sorted(tests.items()):
            if outcome["outcome"] == "failed" and base["tests"].get(
                    test_id, {}).get("outcome") != "passed":
                print(f"  fails with both drivers: {test_id}")
        if tests and not disks:
            problems.append(f"{which}: no {rendered}: the switch did nothing")
    for problem in problems:
        print(f"FAILED {problem}")
    return 1 if problems else 0
