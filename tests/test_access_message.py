"""The message for data QEMU's user cannot open with label_policy 'none' (the real denial is
provoked on the nested AppArmor host, where QEMU runs as libvirt-qemu: tests/lsm/)."""

from __future__ import annotations

import os

from virtdriver.hypervisor.access import explain_denied, qemu_user

LIVE = """<domain type='kvm' id='3'><name>g</name>
  <seclabel type='dynamic' model='apparmor' relabel='yes'><label>libvirt-x</label></seclabel>
  <seclabel type='dynamic' model='dac' relabel='yes'>
    <label>+64055:+994</label><imagelabel>+64055:+994</imagelabel></seclabel>
</domain>"""


def test_qemu_user_from_the_guests_dac_label() -> None:
    assert qemu_user(LIVE) == (64055, 994)
    assert qemu_user("<domain><name>g</name></domain>") is None
    assert qemu_user("not xml") is None


def test_message_names_owner_qemu_user_and_both_ways_out(tmp_path) -> None:
    data = tmp_path / "volume"
    data.write_bytes(b"")
    os.chmod(data, 0o600)
    text = explain_denied(str(data), LIVE)
    assert text is not None and "\n" not in text
    assert "(uid 64055)" in text and f"cannot open {data} (owner root:root, mode -rw-------)" in text
    assert "label_policy 'auto'" in text and "udev rule" in text
    assert explain_denied(str(tmp_path / "gone"), LIVE) is None
