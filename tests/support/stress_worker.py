"""A worker process of the concurrency stress test: its own LibvirtVolumeDriver, several threads.

Started as ``python -m tests.support.stress_worker`` with a JSON setup on its first stdin line::

    {"uri": ..., "state_dir": ..., "guests": [...], "volumes": [[volume_id, info], ...],
     "threads": 2, "ops": 3, "name": "p0", "seed": 1}

then, for every line ``round N`` it reads, runs one round and answers one JSON line
``{"round": N, "outcomes": {...}, "unexpected": [...]}``. An empty line or EOF ends it.
"""

from __future__ import annotations

import faulthandler
import json
import signal
import sys
import warnings


def main() -> int:
    warnings.simplefilter("ignore")
    faulthandler.register(signal.SIGUSR1)  # stacks of every thread on demand, for hangs
    from tests.support.stress_ops import StressVolume, Tally, run_round
    from virtdriver import LibvirtVolumeDriver

    setup = json.loads(sys.stdin.readline())
    volumes = [StressVolume(vid, info) for vid, info in setup["volumes"]]
    driver = LibvirtVolumeDriver(setup["uri"], state_dir=setup["state_dir"], detach_timeout=20)
    print(json.dumps({"ready": setup["name"]}), flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            break
        number = int(line.split()[1])
        tally = Tally()
        seeds = [setup["seed"] * 1000 + number * 10 + i for i in range(setup["threads"])]
        run_round(driver, seeds, setup["ops"], setup["guests"], volumes, tally,
                  f"{setup['name']}/r{number}")
        print(json.dumps({"round": number, "outcomes": dict(tally.outcomes),
                          "unexpected": tally.unexpected}), flush=True)
    driver.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
