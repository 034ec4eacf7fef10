"""``extend`` and ``swap`` without a guest: usage errors, the left-behind report, sizes."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Callable
from pathlib import Path

import pytest

from testhosts.guests import LoopDevice, query_block, read_pattern, write_pattern
from tests.support.volumes import local_volume

MIB = 1 << 20


def command(state: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "virtdriver", "--connect", "qemu:///system",
            "--state-dir", str(state), *args]


def run(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command(state, *args), capture_output=True, text=True, check=False)


# ---- extend ---------------------------------------------------------------------------------


def test_extend_usage_errors_are_one_line(tmp_path) -> None:
    bad = run(tmp_path, "extend", str(tmp_path / "none.json"), "--size", "lots")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "is not a size" in bad.stderr


# ---- swap -----------------------------------------------------------------------------------


# ---- the progress bar on a pseudo-terminal --------------------------------------------------


# ---- the result of an extend, without a host ------------------------------------------------


def test_a_guest_left_behind_is_named_with_its_size_reason_and_fix() -> None:
    from virtdriver.driver.extend import ExtendResult, GuestSize
    from virtdriver.errors import ExtendIncomplete, HostError

    ok = GuestSize("a", "ua", "sda", "rw", True, 64 * MIB, "resized", True)
    off = GuestSize("c", "uc", "sda", "ro", False, None, "at start", False)
    behind = GuestSize("b", "ub", "sdb", "ro", True, 32 * MIB, "failed", False,
                       problem="QEMU cannot read the new size", fix="detach and attach it again")
    assert ExtendResult("v", 64 * MIB, 64 * MIB, [ok, off]).complete  # shut off: at its start
    result = ExtendResult("v", 64 * MIB, 64 * MIB, [ok, behind, off])
    assert not result.complete and result.left_behind() == [behind]
    error = result.incomplete_error()
    assert isinstance(error, ExtendIncomplete) and isinstance(error, HostError)
    assert error.exit_code == 1 and "\n" not in str(error)
    assert str(error) == (f"volume v was grown to {64 * MIB} bytes, but b shows {32 * MIB} bytes "
                          "(QEMU cannot read the new size); detach and attach it again")
    assert result.to_json()["complete"] is False


@pytest.mark.parametrize(("text", "size"), [("1073741824", 1 << 30), ("96M", 96 * MIB),
                                             ("1G", 1 << 30), ("2GiB", 2 << 30),
                                             ("512k", 512 << 10)])
def test_sizes(text: str, size: int) -> None:
    from virtdriver.cli.swap_extend import size_argument

    assert size_argument(text) == size
