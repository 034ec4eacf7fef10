"""Concurrency stress: threads and processes attaching and detaching at random, on real guests.

Eight guests (six persistent, two transient), one multiattach volume (a loop device, LOCAL) and
one volume that is not multiattach (a raw file, GPFS). In every round the test's own threads
(sharing one LibvirtVolumeDriver) and two worker processes (each with its own driver and
threads, all sharing one state_dir) issue random attach/detach calls with random ro/rw; after
the round the invariants of tests/support/invariants.py are checked against libvirt's live state.

``VIRTDRIVER_STRESS_ROUNDS`` (default 30, about 25 s) sets the number of rounds.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest

from testhosts.guests import sparse_file
from tests.support import ROOT
from tests.support.invariants import InvariantChecker, volume_disks
from tests.support.stress_ops import StressVolume, Tally, run_round
from tests.support.volumes import file_volume, local_volume

# whole_host: threads and processes at random on eight guests, a load test of its own
pytestmark = [pytest.mark.hypervisor, pytest.mark.whole_host]

ROUNDS = int(os.environ.get("VIRTDRIVER_STRESS_ROUNDS", "30"))
GUESTS = 8
TRANSIENT = 2
MAIN_THREADS = 3
PROCESSES = 2
PROCESS_THREADS = 2
OPS_PER_THREAD = 3
REPLY_TIMEOUT = 180.0


class Worker:
    """A worker process (tests/support/stress_worker.py) and a thread reading its answers."""

    def __init__(self, setup: dict[str, Any], log: Path) -> None:
        self.name = setup["name"]
        self.log = log
        with open(log, "w") as stderr:  # a file: an undrained pipe would block the worker
            self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.stress_worker"],
                                         cwd=ROOT, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=stderr, text=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,),
                                        daemon=True)
        self._reader.start()
        self._send(json.dumps(setup))
        assert self.answer() == {"ready": self.name}

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            if line.startswith("{"):
                self.answers.put(json.loads(line))
        self.answers.put(None)

    def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def start_round(self, number: int) -> None:
        self._send(f"round {number}")

    def answer(self) -> dict[str, Any]:
        try:
            got = self.answers.get(timeout=REPLY_TIMEOUT)
        except queue.Empty:
            raise AssertionError(
                f"worker {self.name} gave no answer in {REPLY_TIMEOUT} s") from None
        if got is None:
            raise AssertionError(f"worker {self.name} died: {self.log.read_text()[-3000:]}")
        return got

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self._send("")
                self.proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()  # our own child, by its handle
                self.proc.wait(10)


def test_random_concurrent_attach_detach_keeps_every_invariant(
        guests, system_conn, loop_device, tmp_path, capsys) -> None:
    from virtdriver import LibvirtVolumeDriver

    started = time.monotonic()
    doms = [guests.start(f"s{i}", persistent=i >= TRANSIENT) for i in range(GUESTS)]
    names = [d.name() for d in doms]
    image = sparse_file(tmp_path / "single.raw")
    shared = local_volume(loop_device.device, multiattach=True)
    single = file_volume(str(image), multiattach=False)
    volumes = [StressVolume(shared["data"]["volume_id"], shared),
               StressVolume(single["data"]["volume_id"], single)]
    state_dir = tmp_path / "state"
    checker = InvariantChecker(system_conn, state_dir,
                               {v.volume_id: v.multiattach for v in volumes})
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=state_dir, detach_timeout=20)
    tally = Tally()
    workers: list[Worker] = []
    try:
        for p in range(PROCESSES):
            workers.append(Worker({
                "uri": "qemu:///system", "state_dir": str(state_dir), "guests": names,
                "volumes": [[v.volume_id, v.connection_info] for v in volumes],
                "threads": PROCESS_THREADS, "ops": OPS_PER_THREAD, "name": f"p{p}",
                "seed": 7919 * (p + 1)}, tmp_path / f"worker-p{p}.log"))
        checker.check("before any operation:")
        for number in range(ROUNDS):
            for w in workers:
                w.start_round(number)
            seeds = [104729 + number * 100 + i for i in range(MAIN_THREADS)]
            run_round(driver, seeds, OPS_PER_THREAD, names, volumes, tally, f"main/r{number}")
            for w in workers:
                got = w.answer()
                assert got["round"] == number
                tally.merge(got["outcomes"], got["unexpected"])
            assert not tally.unexpected, "\n\n".join(tally.unexpected)
            checker.check(f"after round {number}:")

        # Everything still attached is detached again; then nothing is left anywhere.
        for v in volumes:
            for name in sorted({d.domain for d in volume_disks(system_conn, v.volume_id)}):
                driver.detach_volume(name, v.volume_id)
                tally.add("final detach: ok")
            assert volume_disks(system_conn, v.volume_id) == []
        checker.check("after the final detach:")
        assert driver.records.connected() == []
    finally:
        for w in workers:
            w.stop()
        driver.close()

    elapsed = time.monotonic() - started
    # The mix must really have exercised sharing, refusals and both volumes.
    for outcome in ("attach ma: ok", "attach single: ok", "detach ma: ok",
                    "detach single: ok", "attach single: in use elsewhere"):
        assert tally.outcomes[outcome] > 0, (outcome, dict(tally.outcomes))
    with capsys.disabled():
        print(f"\nstress: {tally.total} operations by {MAIN_THREADS} threads + {PROCESSES} "
              f"processes x {PROCESS_THREADS} threads over {ROUNDS} rounds on {GUESTS} guests, "
              f"{checker.passed} invariant checks passed, {elapsed:.1f} s")
        for outcome, count in sorted(tally.outcomes.items()):
            print(f"  {outcome:36} {count}")
