"""A share attached through the real CLI on this host's private ``/``: what the operator reads.

The CLI prints only what an operator should read: a guest that cannot see shares is refused in
one line that names the fix, a guest started afterwards gets the share, and os-brick's own
logging ("Connection details not present ...") never reaches the terminal. It still reaches an
application that asks for it, under ``virtdriver.backend``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from tests.support.backends import gluster_file, need

OS_BRICK_NOISE = "Connection details not present"


def run_cli(*args: str, state) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "virtdriver", "--connect", "qemu:///system",
                           "--state-dir", str(state), *args],
                          capture_output=True, text=True, check=False)


@pytest.mark.hypervisor
def test_cli_attaches_a_share_with_nothing_prepared_and_prints_no_os_brick_noise(
        guests, backends, tmp_path, private_mount_base) -> None:
    need(backends, "gluster")
    if backends.get("VD_GLUSTER_FUSE") != "1":
        pytest.skip("FUSE mounts do not work here (scripts/test-backends.sh reports why)")
    from virtdriver.hypervisor.mounts import propagates

    if propagates(private_mount_base):
        pytest.skip("/ is a shared mount here: mounts propagate without the driver's help")
    state = tmp_path / "state"
    early = guests.start("early")
    with gluster_file(backends, tmp_path) as name:
        vid = str(uuid.uuid4())
        path = tmp_path / "v.json"
        path.write_text(json.dumps({
            "driver_volume_type": "glusterfs", "serial": vid,
            "data": {"volume_id": vid, "export": backends["VD_GLUSTER_SHARE"], "name": name}}))
        refused = run_cli("attach", early.name(), str(path), "--bus", "scsi",
                          "--mount-base", private_mount_base, state=state)
        assert refused.returncode == 1
        assert refused.stdout == ""
        (line,) = refused.stderr.splitlines()
        assert line.startswith(f"virtdriver: error: guest {early.name()} cannot see the share")
        assert f"mount --make-shared {private_mount_base}" in line

        late = guests.start("late")
        done = run_cli("attach", late.name(), str(path), "--bus", "scsi",
                       "--mount-base", private_mount_base, state=state)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        assert f"attached to {late.name()}" in done.stdout
        gone = run_cli("detach", late.name(), vid, state=state)  # the record knows the mount
        assert gone.returncode == 0 and gone.stderr == "", gone.stderr


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
