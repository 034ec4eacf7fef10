"""os-brick's own logging reaches an application that asks for it, under ``virtdriver.backend``."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from tests.support.backends import gluster_file, need

OS_BRICK_NOISE = "Connection details not present"


LIBRARY_USER = """
import logging, sys
from pathlib import Path
if sys.argv[2] == "debug":
    logging.basicConfig(level=logging.DEBUG, format="%(name)s|%(message)s")
from virtdriver.hypervisor import brick
brick.connector_for("GLUSTERFS", Path(sys.argv[1]), glusterfs_mount_point_base=sys.argv[1])
"""


def test_os_brick_logging_goes_through_virtdriver_backend(tmp_path) -> None:
    """A library user that configured no logging sees nothing; one that enables DEBUG sees
    os-brick's records under virtdriver.backend, with their original level."""

    def run(mode: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", LIBRARY_USER, str(tmp_path), mode],
                              capture_output=True, text=True, check=True)

    assert OS_BRICK_NOISE not in run("quiet").stderr
    lines = [ln for ln in run("debug").stderr.splitlines() if OS_BRICK_NOISE in ln]
    assert lines and all(
        ln.startswith("virtdriver.backend.os_brick.") and "|[WARNING] " in ln for ln in lines)
