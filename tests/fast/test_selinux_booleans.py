"""SELinux booleans a protocol needs (``selinux_booleans``): read from selinuxfs, reported by
``doctor``, named by a refused attach. Observed for real in the nested SELinux host
(tests/nested/test_nfs_share.py); here the reading and the wording, with no SELinux."""

from __future__ import annotations

from pathlib import Path

import pytest

from virtdriver.hypervisor.access import booleans_off
from virtdriver.ops.doctor.probes import boolean_check
from virtdriver.selinux import boolean
from virtdriver.volume.registry import get_driver


def test_boolean_reads_selinuxfs(tmp_path: Path) -> None:
    (tmp_path / "virt_use_nfs").write_text("0 0")
    (tmp_path / "virt_use_samba").write_text("1 1")
    assert boolean("virt_use_nfs", tmp_path) is False
    assert boolean("virt_use_samba", tmp_path) is True
    assert boolean("no_such_boolean", tmp_path) is None  # not in the policy, or no SELinux


def test_nfs_declares_virt_use_nfs_and_local_declares_none() -> None:
    assert get_driver("nfs").selinux_booleans == ("virt_use_nfs",)
    assert get_driver("local").selinux_booleans == ()


@pytest.mark.parametrize(("state", "status"), [(False, "warn"), (True, "ok"), (None, "ok")])
def test_doctor_reports_each_boolean_and_how_to_turn_it_on(state, status) -> None:
    facts: dict = {}
    found = boolean_check(facts, read=lambda name: state)
    assert found is not None and found.status == status
    assert found.detail.startswith("virt_use_nfs ")
    assert "(nfs)" in found.detail
    assert ("setsebool -P virt_use_nfs on" in found.detail) is (state is False)
    assert facts["selinux"]["booleans"]["virt_use_nfs"] is state


def test_a_refused_attach_names_the_boolean_that_is_off(monkeypatch) -> None:
    import virtdriver.selinux

    info = {"driver_volume_type": "nfs", "data": {}}
    monkeypatch.setattr(virtdriver.selinux, "boolean", lambda name: False)
    assert booleans_off(info) == ["virt_use_nfs"]
    monkeypatch.setattr(virtdriver.selinux, "boolean", lambda name: True)
    assert booleans_off(info) == []
    monkeypatch.setattr(virtdriver.selinux, "boolean", lambda name: None)  # no SELinux here
    assert booleans_off(info) == []
    assert booleans_off({"driver_volume_type": "no-such-type"}) == []
