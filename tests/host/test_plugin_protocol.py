"""A protocol from another package is complete inside its own module.

``tests/plugins/vd_testfs`` is a package of its own that declares a ``virtdriver.volume_drivers``
entry point for ``testfs``: a network filesystem (a GlusterFS share, mounted by os-brick) whose
host side -- os-brick protocol, mount base, connector options -- it declares only through the
protocol contract. Installed next to virtdriver (its dist-info generated from its own
``pyproject.toml``), it is attached to two real guests through the CLI, shared, and detached; the
share is mounted for them and unmounted after the last one. Nothing in virtdriver knows the name.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import pytest

from testhosts.guests import block_info, read_pattern, write_pattern
from tests.support import ROOT
from tests.support.backends import need
from virtdriver.hypervisor import mounts
from virtdriver.volume.remotefs import mount_point

pytestmark = pytest.mark.hypervisor
PLUGIN = ROOT / "tests" / "plugins" / "vd_testfs"


def install(site: Path) -> None:
    """The plugin as an installed distribution: its module and a dist-info with its entry
    points, read from its pyproject.toml (what pip would write)."""
    project = tomllib.loads((PLUGIN / "pyproject.toml").read_text())["project"]
    shutil.copytree(PLUGIN / "vd_testfs", site / "vd_testfs")
    dist = site / f"vd_testfs-{project['version']}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\n"
                                   f"Version: {project['version']}\n")
    lines = []
    for group, entries in project["entry-points"].items():
        lines.append(f"[{group}]")
        lines += [f"{name} = {target}" for name, target in entries.items()]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")


def test_a_plugin_network_filesystem_attaches_shares_and_releases(
        guests, backends, tmp_path, private_mount_base) -> None:
    need(backends, "gluster")
    site = tmp_path / "site"
    site.mkdir()
    install(site)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))
    state = tmp_path / "state"

    def cli(*argv: str) -> str:
        done = subprocess.run([sys.executable, "-m", "virtdriver", "--state-dir", str(state),
                               *argv], capture_output=True, text=True, env=env, timeout=120,
                              check=False)
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        return done.stdout

    share = backends["VD_GLUSTER_SHARE"]
    mounts.ensure_shared(private_mount_base, state / "locks")  # before the guests start
    a, b = guests.start("a"), guests.start("b")
    vid = str(uuid.uuid4())
    info = tmp_path / "testfs.json"
    info.write_text(json.dumps({
        "driver_volume_type": "testfs", "serial": vid, "multiattach": True,
        "data": {"volume_id": vid, "export": share, "name": backends["VD_GLUSTER_IMAGE"]}}))
    mount = mount_point(private_mount_base, share)  # where os-brick mounts the share

    cli("attach", a.name(), str(info), "--mount-base", private_mount_base)
    cli("attach", b.name(), str(info), "--mount-base", private_mount_base, "--attach-mode", "ro")
    assert os.path.ismount(mount)
    alias = f"ua-{vid}"
    assert block_info(b, alias).ro and block_info(a, alias).direct
    write_pattern(a, alias, 0x3D, offset=4096)
    assert read_pattern(b, alias, 0x3D, offset=4096)
    assert f"{mount}/{backends['VD_GLUSTER_IMAGE']}" in a.XMLDesc(0)

    cli("detach", a.name(), vid)
    assert os.path.ismount(mount)  # B still reads through it
    cli("detach", b.name(), vid)
    assert not os.path.ismount(mount)
    assert not list((state / "connections").glob("*.json"))


@pytest.mark.parametrize("mount_type", ["nfs", "glusterfs", "cifs", "quobyte", "vzstorage"])
@pytest.mark.parametrize("export", ["127.0.0.1:/vol", "host.example:/a/b/", "//srv/share",
                                    "[::1]:/e x p", "ünïcode:/v"])
def test_the_mount_point_is_os_bricks(mount_type: str, export: str) -> None:
    """Rendering finds a share's files where os-brick's RemoteFsClient mounts it (the render
    path computes it without loading os-brick, which would cost most of a render's time)."""
    from os_brick.remotefs.remotefs import RemoteFsClient

    option = "smbfs" if mount_type == "cifs" else mount_type  # os-brick's keyword for SMB
    client = RemoteFsClient(mount_type, None, **{f"{option}_mount_point_base": "/base"})
    assert mount_point("/base", export) == client.get_mount_point(export)
