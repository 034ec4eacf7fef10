"""A wait for another operation's lock is said, not silent (issue #25).

A real second process holds the lock throughout (so nothing here depends on timing): the waiter
says once, before it gives up, what it waits for, who holds it (the pid the holder recorded) and
how long it will wait; ``--lock-timeout`` bounds the wait of the CLI.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from virtdriver.errors import EXIT_CODES, LockTimeout
from virtdriver.hypervisor.locks import file_token, volume_lock

VID = "7d2c9a10-3b1e-4f55-9c2d-0e1f2a3b4c5d"

HOLDER = """
import sys
from pathlib import Path
from virtdriver.hypervisor.locks import volume_lock
with volume_lock(Path(sys.argv[1]), sys.argv[2], operation="attach"):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes our stdin
"""


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """The volume's lock held by another process, which recorded itself as its holder."""
    lock_dir = tmp_path / "state" / "locks"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_dir), VID],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        yield lock_dir, proc.pid
    finally:
        proc.communicate(timeout=60)


def test_the_wait_is_said_naming_volume_holder_and_timeout(held, caplog) -> None:
    lock_dir, pid = held
    caplog.set_level(logging.WARNING, logger="virtdriver.locks")
    with pytest.raises(LockTimeout, match=rf"volume {VID} is busy.*pid {pid}"):
        with volume_lock(lock_dir, VID, operation="detach", timeout=0.5, notice_after=0.05):
            pass
    said = [r.getMessage() for r in caplog.records if r.name == "virtdriver.locks"]
    assert len(said) == 1, said  # once, not once per poll
    assert said[0].startswith(f"waiting for volume {VID}: pid {pid}, attach, since ")
    assert said[0].endswith("holds its lock; waiting up to 0.5 s (--lock-timeout)")


def test_a_holder_that_recorded_nothing_is_said_to_be_unknown(tmp_path: Path, caplog) -> None:
    lock = tmp_path / f"volume-{file_token(VID)}.lock"
    lock.touch()
    proc = subprocess.Popen(["flock", str(lock), "cat"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    try:
        # flock(1) takes the lock, then starts cat: go on once a try of our own fails
        subprocess.run(["sh", "-c", f"until ! flock -n {lock} true; do :; done"], timeout=60,
                       check=True)
        caplog.set_level(logging.WARNING, logger="virtdriver.locks")
        with pytest.raises(LockTimeout, match="holder unknown"):
            with volume_lock(tmp_path, VID, timeout=0.3, notice_after=0.01):
                pass
    finally:
        proc.communicate(timeout=60)
    said = [r.getMessage() for r in caplog.records if r.name == "virtdriver.locks"]
    assert said == [f"waiting for volume {VID}: another operation (its pid is not recorded) "
                    "holds its lock; waiting up to 0.3 s (--lock-timeout)"]


def test_the_cli_says_the_wait_on_stderr_and_lock_timeout_bounds_it(held,
                                                                     tmp_path: Path) -> None:
    lock_dir, pid = held
    info = tmp_path / "volume.json"
    info.write_text(json.dumps({"driver_volume_type": "local", "serial": VID,
                                "data": {"volume_id": VID, "device_path": "/dev/null"}}))
    done = subprocess.run([sys.executable, "-m", "virtdriver", "-c", "test:///default",
                           "--state-dir", str(lock_dir.parent), "attach", "guest", str(info),
                           "--lock-timeout", "0.4"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == EXIT_CODES["timeout"], done.stderr
    assert done.stdout == ""
    waiting, error = done.stderr.splitlines()
    assert waiting.startswith(f"virtdriver: waiting for volume {VID}: pid {pid}, attach, since ")
    assert waiting.endswith("waiting up to 0.4 s (--lock-timeout)")
    assert error.startswith(f"virtdriver: error: volume {VID} is busy")


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan", "soon"])
def test_lock_timeout_must_be_a_number_of_seconds(value: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "virtdriver", "--state-dir", str(tmp_path),
                           "release", VID, "--lock-timeout", value],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == EXIT_CODES["input"]
    assert len(done.stderr.splitlines()) == 1 and "--lock-timeout" in done.stderr
