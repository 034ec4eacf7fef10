"""Runs tests/host/embed/ (attach/detach through qemu:///embed) in a child pytest.

The embedded driver claims every qemu:/// URI of the process that opened it, so it cannot share
a process with the qemu:///system tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import EMBED_CHILD, ROOT

pytestmark = pytest.mark.hypervisor


@pytest.mark.skipif(EMBED_CHILD, reason="this is the child run itself")
def test_embed_flows_in_their_own_process() -> None:
    env = dict(os.environ, VIRTDRIVER_EMBED_CHILD="1")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/host/embed"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    print(done.stdout[-3000:])
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1]
