"""Races between processes: the identity of data is decided under its lock, not by luck.

Two worker processes (``tests/support/race_worker.py``), each with its own driver on the same
state directory as two compute agents on one host would be, get their commands at the same
moment. Every round must end with exactly one winner where only one may win, a one-line refusal
of the policy kind for the loser, and the host's records matching the guests' disks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT
from tests.support.volumes import local_volume
from virtdriver import LibvirtVolumeDriver
from virtdriver.errors import PolicyRefusal

pytestmark = pytest.mark.hypervisor
ROUNDS = 4  # per spelling; each round is a real attach race on real guests


class Worker:
    def __init__(self, state_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.race_worker", "qemu:///system",
             str(state_dir)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        assert json.loads(self.readline()) == {"ready": True}

    def readline(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read() if self.proc.stderr else "worker died"
        return line

    def send(self, command: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(30)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[tuple[Worker, Worker]]:
    pair = (Worker(tmp_path / "state"), Worker(tmp_path / "state"))
    yield pair
    for worker in pair:
        worker.close()


def race(workers: tuple[Worker, Worker], commands: list[dict[str, Any]]) -> list[dict]:
    """Hand both workers their command at once; their answers, in order."""
    start = threading.Barrier(2)

    def go(worker: Worker, command: dict[str, Any]) -> None:
        start.wait()
        worker.send(command)

    threads = [threading.Thread(target=go, args=pair) for pair in zip(workers, commands)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [json.loads(worker.readline()) for worker in workers]


def spellings(device: str, tmp_path: Path) -> dict[str, str]:
    """The same block device under other names: slashes, a dot, a symlink, a second node."""
    link = tmp_path / "link"
    link.symlink_to(device)
    node = tmp_path / "node"
    rdev = os.stat(device).st_rdev
    os.mknod(node, 0o600 | 0o060000, rdev)  # S_IFBLK
    return {"same": device, "slashes": f"/dev//{device[5:]}", "dot": f"/dev/./{device[5:]}",
            "symlink": str(link), "node": str(node)}


@pytest.mark.parametrize("multiattach", [False, True], ids=["single", "multiattach"])
def test_two_ids_on_one_device_from_two_processes_exactly_one_wins(
        multiattach: bool, guests, workers, loop_device, tmp_path) -> None:
    a, b = guests.start("a"), guests.start("b")
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state")
    names = spellings(loop_device.device, tmp_path)
    outcomes = []
    for spelling, path in names.items():
        for round_ in range(ROUNDS):
            first = local_volume(loop_device.device, multiattach=multiattach)
            second = local_volume(path, multiattach=multiattach)
            answers = race(workers, [{"op": "attach", "info": first, "guest": a.name()},
                                     {"op": "attach", "info": second, "guest": b.name()}])
            won = [i for i, answer in enumerate(answers) if answer.get("ok")]
            assert len(won) == 1, (spelling, round_, answers)
            lost = answers[1 - won[0]]
            assert lost["kind"] == PolicyRefusal.exit_code, lost
            assert "\n" not in lost["message"] and "under another name" in lost["message"], lost
            winner, info = [(a, first), (b, second)][won[0]]
            vid = info["data"]["volume_id"]
            # Nothing of the loser anywhere: one disk, one record, the winner's.
            assert [x.volumeId for x in driver.list_attachments(winner.name())] == [vid]
            assert driver.list_attachments([b, a][won[0]].name()) == []
            assert driver.records.connected() == [vid]
            driver.detach_volume(winner.name(), vid)
            assert driver.records.connected() == []
            outcomes.append(won[0])
    assert len(outcomes) == ROUNDS * len(names)


def test_a_detach_racing_an_attach_elsewhere_keeps_the_connection(
        guests, workers, loop_device, tmp_path) -> None:
    a, b = guests.start("a"), guests.start("b")
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state")
    info = local_volume(loop_device.device, multiattach=True)
    vid = info["data"]["volume_id"]
    for round_ in range(ROUNDS):
        driver.attach_volume(info, a.name())
        answers = race(workers, [{"op": "detach", "guest": a.name(), "volume_id": vid},
                                 {"op": "attach", "info": info, "guest": b.name()}])
        assert answers == [{"ok": True}, {"ok": True}], (round_, answers)
        # B has the volume: whichever went first, the host connection must still be there.
        assert [x.volumeId for x in driver.list_attachments(b.name())] == [vid]
        assert driver.records.connected() == [vid], round_
        driver.detach_volume(b.name(), vid)
        assert driver.records.connected() == []
