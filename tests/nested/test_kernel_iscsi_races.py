"""Races on a real iSCSI session in the nested test host (issue #31, the class of nova bug
2048837): two processes, each with its own driver on the same host state, attach and detach the
same volume to different guests at once, round after round.

Each round:
1. worker 1 attaches guest A (rw) while worker 2 attaches guest B (ro): exactly one login (the
   kernel prints one "iSCSI Initiator over TCP/IP" line per session it creates), one session,
   both guests' disks work (B reads what A wrote);
2. worker 1 detaches A while worker 2 detaches B: the session ends, no node record is left;
3. worker 1 attaches A; then worker 1 detaches A while worker 2 attaches B: whichever wins, B
   ends attached with a working disk over a live session (never torn down under it), and at
   most one more login happened; then B is detached and the session ends.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path

import pytest

from tests.host.test_races import Worker
from tests.nested.test_kernel_iscsi import (  # noqa: F401 - fixture
    BLOCK,
    IQN,
    lun_info,
    sessions,
    tgt_lun,
    wait_until,
)

pytestmark = pytest.mark.kernel_initiator

ROUNDS = 5  # under TCG a round (six attaches/detaches, guest I/O) takes about a minute
LOGIN_LINE = "iSCSI Initiator over TCP/IP"


def logins() -> int:
    """Sessions the kernel created since boot (one line per iSCSI host, i.e. per login)."""
    out = subprocess.run(["dmesg"], capture_output=True, text=True, check=True).stdout
    return sum(LOGIN_LINE in line for line in out.splitlines())


def session_count() -> int:
    return sum(IQN in line for line in sessions().splitlines())


def both(w1: Worker, c1: dict, w2: Worker, c2: dict) -> tuple[dict, dict]:
    """Hand both workers their command at the same moment; their answers."""
    w1.send(c1)
    w2.send(c2)
    return json.loads(w1.readline()), json.loads(w2.readline())


def test_two_processes_race_on_one_session(tgt_lun, guests, tmp_path: Path) -> None:
    from testhosts.guests import block_info, read_pattern, write_pattern

    a, b = guests.start("a"), guests.start("b")
    w1, w2 = Worker(tmp_path / "state"), Worker(tmp_path / "state")
    info = lun_info()
    vid = info["data"]["volume_id"]
    alias = f"ua-{vid}"
    att_a = {"op": "attach", "info": info, "guest": a.name(), "mode": "rw"}
    att_b = {"op": "attach", "info": info, "guest": b.name(), "mode": "ro"}
    det_a = {"op": "detach", "guest": a.name(), "volume_id": vid}
    det_b = {"op": "detach", "guest": b.name(), "volume_id": vid}
    ok = {"ok": True}
    per_round = []
    try:
        for n in range(ROUNDS):
            # 1. attach ‖ attach: one login
            before = logins()
            assert both(w1, att_a, w2, att_b) == (ok, ok), n
            assert session_count() == 1, sessions()
            assert logins() - before == 1, f"round {n}: {logins() - before} logins"
            pattern = secrets.randbelow(200) + 20
            offset = secrets.randbelow(1000) * BLOCK
            write_pattern(a, alias, pattern, offset=offset)
            assert read_pattern(b, alias, pattern, offset=offset), n
            assert block_info(b, alias).ro
            # 2. detach ‖ detach: the session ends with the last
            assert both(w1, det_a, w2, det_b) == (ok, ok), n
            wait_until(lambda: session_count() == 0, 30, f"round {n}: the session gone")
            # 3. detach A ‖ attach B: never torn down under B
            w1.send(att_a)
            assert json.loads(w1.readline()) == ok, n
            assert session_count() == 1
            before = logins()
            assert both(w1, det_a, w2, att_b) == (ok, ok), n
            again = logins() - before
            assert again <= 1, f"round {n}: {again} logins for one attach"
            assert session_count() == 1, f"round {n}: B attached without a session"
            source = block_info(b, alias).file
            assert Path(source).exists(), (n, source)
            assert read_pattern(b, alias, pattern, offset=offset), \
                f"round {n}: B's disk lost its session (B attached, then A's detach logged out)"
            w2.send(det_b)
            assert json.loads(w2.readline()) == ok, n
            wait_until(lambda: session_count() == 0, 30, f"round {n}: the session gone")
            per_round.append(1 + again)
    finally:
        w1.close()
        w2.close()
    print(f"{ROUNDS} rounds; logins per round (step 1 + step 3): {per_round}")
