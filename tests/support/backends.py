"""The storage test backends (scripts/test-backends.sh: tgt, qemu-nbd, Ceph, Gluster on
127.0.0.1) as pytest fixtures, and a mount base nobody prepared, for the tests that need them."""

from __future__ import annotations

import base64
import contextlib
import os
import shlex
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ROOT, script_env
from virtdriver.hypervisor import mounts

SCRIPT = ROOT / "scripts" / "test-backends.sh"


@pytest.fixture(scope="session")
def backends() -> dict[str, str]:
    """The environment scripts/test-backends.sh describes (scripts/test.sh starts them)."""
    return script_env(SCRIPT)


def need(backends: dict[str, str], name: str) -> None:
    """Skip (fail under CI) unless the backend `name` is up."""
    if backends.get(f"VD_{name.upper()}_UP") == "1":
        return
    reason = f"{name} test backend is not running (scripts/test-backends.sh up {name})"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture
def ceph_secret(backends, system_conn) -> Iterator[str]:
    """The libvirt ceph secret a compute service defines for its cephx user."""
    need(backends, "ceph")
    uid = str(uuid.uuid4())
    secret = system_conn.secretDefineXML(
        f"<secret ephemeral='no' private='yes'><uuid>{uid}</uuid><usage type='ceph'>"
        f"<name>virtdriver-test-{uid}</name></usage></secret>", 0)
    secret.setValue(base64.b64decode(backends["VD_CEPH_CLIENT_KEY"]), 0)
    yield uid
    secret.undefine()


@pytest.fixture
def private_mount_base() -> Iterator[str]:
    """A mount base nobody prepared: a plain directory (on this host's private ``/``, which is
    what these tests are about; where ``/`` is shared, the driver has nothing to do).

    Not below pytest's ``tmp_path``: other pytest sessions on the host clean up old numbered
    directories by renaming them, which would hide the driver's bind mount from the teardown.
    """
    base = tempfile.mkdtemp(prefix="virtdriver-test-mnt-", dir="/var/tmp")
    try:
        yield base
    finally:  # whatever a failed test left mounted (deepest first), then the bind mount itself
        while below := sorted((e.mount_point for e in mounts.read_mountinfo()
                               if e.mount_point == base or e.mount_point.startswith(base + "/")),
                              key=len):
            subprocess.run(["umount", below[-1]], check=True)
        shutil.rmtree(base)  # only once nothing is mounted below it: never a share's files


@contextlib.contextmanager
def gluster_file(backends, tmp_path: Path) -> Iterator[str]:
    """A 16 MiB raw file on the test Gluster volume, removed afterwards."""
    name = f"extend-{uuid.uuid4().hex[:12]}.raw"
    url = f"gluster://{backends['VD_GLUSTER_HOST']}/{backends['VD_GLUSTER_VOLUME']}/{name}"
    subprocess.run(["qemu-img", "create", "-q", "-f", "raw", url, "16M"], check=True,
                   capture_output=True)
    try:
        yield name
    finally:
        scratch = tmp_path / "cleanup-mount"
        scratch.mkdir(exist_ok=True)
        subprocess.run(["mount", "-t", "glusterfs", backends["VD_GLUSTER_SHARE"], str(scratch)],
                       check=True, capture_output=True)
        try:
            (scratch / name).unlink(missing_ok=True)
        finally:
            subprocess.run(["umount", str(scratch)], check=True)
