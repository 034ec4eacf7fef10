"""A worker process of the race tests: one LibvirtVolumeDriver, driven one JSON line at a time.

Started as ``python -m tests.support.race_worker URI STATE_DIR``; it imports everything and
prints ``{"ready": true}``, so that the test can hand two workers their commands at the same
moment. Each stdin line is ``{"op": "attach"|"detach", ...}``; each answer one JSON line
``{"ok": true}`` or ``{"error": <class name>, "kind": <exit code>, "message": ...}``.
"""

from __future__ import annotations

import json
import sys
import warnings


def main() -> int:
    warnings.simplefilter("ignore")
    from virtdriver import LibvirtVolumeDriver
    from virtdriver.errors import VirtDriverError

    driver = LibvirtVolumeDriver(sys.argv[1], state_dir=sys.argv[2])
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            break
        command = json.loads(line)
        try:
            if command["op"] == "attach":
                driver.attach_volume(command["info"], command["guest"],
                                     attach_mode=command.get("mode", "rw"))
            else:
                driver.detach_volume(command["guest"], command["volume_id"])
            answer: dict = {"ok": True}
        except VirtDriverError as exc:
            answer = {"error": type(exc).__name__, "kind": exc.exit_code, "message": str(exc)}
        print(json.dumps(answer), flush=True)
    driver.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
