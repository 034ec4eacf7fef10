"""``doctor`` on mount propagation, probed for real in new and running guests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fast.test_doctor_sharedfs import check, doctor_json
from virtdriver import LibvirtVolumeDriver
from virtdriver.hypervisor import mounts
from virtdriver.volume import known_types


@pytest.mark.hypervisor
def test_doctor_probes_propagation_into_new_and_running_guests(guests, tmp_path,
                                                               private_mount_base) -> None:
    if mounts.propagates(private_mount_base):
        pytest.skip("/ is a shared mount here: there is nothing to find")
    early = guests.start("early")
    before = doctor_json(tmp_path / "state", "--mount-base", private_mount_base)
    found = check(before, "mount propagation")
    assert found["status"] == "warn"
    assert f"mount --make-shared {private_mount_base}" in found["detail"]
    assert before["facts"]["mount_propagation"]["new_namespace"] is False

    LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state",
                        mount_base=private_mount_base).prepare_host()
    late = guests.start("late")
    after = doctor_json(tmp_path / "state", "--mount-base", private_mount_base)
    facts = after["facts"]["mount_propagation"]
    assert facts["shared"] is True and facts["new_namespace"] is True
    assert facts["running_guests"][late.name()] is True
    assert facts["running_guests"][early.name()] is False  # its namespace predates the share
    found = check(after, "mount propagation")
    assert found["status"] == "warn" and early.name() in found["detail"]
    assert "restart them" in found["detail"]
    # the probe left nothing behind
    assert os.listdir(private_mount_base) == []
    assert not any("virtdriver-doctor" in e.mount_point for e in mounts.read_mountinfo())
