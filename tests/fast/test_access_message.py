"""The message for data QEMU's user cannot open with label_policy 'none' (the real denial is
provoked on the nested AppArmor host, where QEMU runs as libvirt-qemu: tests/nested/)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from virtdriver.hypervisor.access import closed_directory, closed_file, explain_denied, qemu_user

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
    assert "(uid 64055)" in text
    assert f"cannot open {data} (owner root:root, mode -rw-------)" in text
    assert "label_policy 'auto'" in text and "udev rule" in text
    assert explain_denied(str(tmp_path / "gone"), LIVE) is None


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every user may pass, down from / (pytest's own tmp_path is under a 0700
    /tmp/pytest-of-root)."""
    made = Path(tempfile.mkdtemp(prefix="vd-access-", dir="/var/tmp"))
    made.chmod(0o755)
    yield made
    shutil.rmtree(made, ignore_errors=True)


def test_a_directory_qemus_user_may_not_pass_is_named(open_dir) -> None:
    """What hid a mount base under a 0700 directory from QEMU in the nested AppArmor host: the
    first closed directory, not the volume, is the cause."""
    tmp_path = open_dir
    closed = tmp_path / "state"
    share = closed / "mnt" / "abc"
    share.mkdir(parents=True)
    data = share / "volume"
    data.write_bytes(b"")
    os.chmod(data, 0o666)
    os.chmod(closed, 0o700)
    text = closed_directory(str(data), 64055, 64055)
    assert text is not None and "\n" not in text
    assert f"may not pass {closed} (owner root:root, mode drwx------)" in text
    assert closed_directory(str(data), 0, 0) is None  # root passes every mode
    os.chmod(closed, 0o711)
    assert closed_directory(str(data), 64055, 64055) is None


def test_a_file_qemus_user_may_not_open_is_named(tmp_path) -> None:
    data = tmp_path / "volume"
    data.write_bytes(b"")
    os.chmod(data, 0o644)
    text = closed_file(str(data), 64055, 64055, write=True)
    assert text is not None and "may not read and write" in text and "-rw-r--r--" in text
    assert "squashes root" in text
    assert closed_file(str(data), 64055, 64055, write=False) is None  # others may read
    os.chown(data, 64055, 64055)
    os.chmod(data, 0o600)
    assert closed_file(str(data), 64055, 64055, write=True) is None  # its owner
    assert closed_file("/dev/null", 64055, 64055, write=True) is None  # not a regular file
    assert closed_file(str(tmp_path / "gone"), 64055, 64055, write=True) is None
