"""The command line on a real libvirtd: a table to a reader that went away is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import FIXTURES
from tests.fast.test_cli import run


@pytest.mark.hypervisor
@pytest.mark.parametrize("args", [["capabilities"], ["capabilities", "--json"]])
def test_a_table_to_a_reader_that_went_away_is_one_line(args: list[str], system_conn) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "virtdriver", *args], stdout=write_end,
                              stderr=subprocess.PIPE, check=False, timeout=60)
    finally:
        os.close(write_end)
    assert done.returncode == 2
    assert done.stderr.decode() == "virtdriver: error: standard output is closed\n"
