"""``doctor`` lists every protocol of the registry, a plugin's like a built-in one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from virtdriver import LibvirtVolumeDriver
from virtdriver.hypervisor import mounts
from virtdriver.volume import known_types


def doctor_json(state: Path, *extra: str, env: dict[str, str] | None = None) -> dict:
    done = subprocess.run([sys.executable, "-m", "virtdriver", "--state-dir", str(state),
                           "doctor", "--json", *extra], capture_output=True, text=True,
                          check=False, env=env)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return json.loads(done.stdout)


def check(report: dict, name: str) -> dict:
    (found,) = [c for c in report["checks"] if c["name"] == name]
    return found


def test_doctor_lists_every_registered_protocol(tmp_path) -> None:
    report = doctor_json(tmp_path / "state")
    listed = [c["name"] for c in report["checks"] if c["area"] == "protocols"]
    assert listed == known_types()
    assert report["facts"]["protocols"]["nbd"] == {"kernel": None, "qemu": True}


PLUGIN = '''
from virtdriver.volume.base import VolumeDriver


class PlugFSVolumeDriver(VolumeDriver):
    volume_type = "plugfs"
    qemu_block_driver = "no-such-qemu-driver"

    def host_probe(self):
        return True, "plugfs helper found"
'''


def test_a_plugin_protocol_appears_in_doctor_like_a_built_in(tmp_path) -> None:
    """A package declaring a virtdriver.volume_drivers entry point, installed (on sys.path with
    its dist-info), is probed through the same declarations as the built-ins."""
    site = tmp_path / "site"
    (site / "plugfs_virtdriver").mkdir(parents=True)
    (site / "plugfs_virtdriver" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    dist = site / "plugfs_virtdriver-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plugfs-virtdriver\n"
                                   "Version: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[virtdriver.volume_drivers]\nplugfs = plugfs_virtdriver:PlugFSVolumeDriver\n")
    env = dict(os.environ, PYTHONPATH=str(site))
    report = doctor_json(tmp_path / "state", env=env)
    found = check(report, "plugfs")
    assert found["area"] == "protocols" and found["status"] == "ok"
    assert found["detail"] == ("host: yes (plugfs helper found); QEMU: no (no-such-qemu-driver "
                               "driver missing: qemu-block-extra)")
    assert report["facts"]["protocols"]["plugfs"] == {"kernel": True, "qemu": False}
