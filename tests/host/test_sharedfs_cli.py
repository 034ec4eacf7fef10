"""A share attached through the real CLI on this host's private ``/``: what the operator reads.

The CLI prints only what an operator should read: a guest that cannot see shares is refused in
one line that names the fix, a guest started afterwards gets the share, and os-brick's own
logging ("Connection details not present ...") never reaches the terminal."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from tests.support.backends import gluster_file, need


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
