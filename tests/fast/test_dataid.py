"""The identity of data: one device or file, however its path is spelled, is one identity."""

from __future__ import annotations

import os
import stat

import pytest

from virtdriver.config import Disk
from virtdriver.hypervisor.dataid import data_identity, identity_token


def _file_disk(path: str) -> Disk:
    return Disk.from_xml(f"<disk type='file' device='disk'><source file='{path}'/>"
                         "<target dev='sda'/></disk>")


def _block_disk(path: str) -> Disk:
    return Disk.from_xml(f"<disk type='block' device='disk'><source dev='{path}'/>"
                         "<target dev='sda'/></disk>")


def test_a_file_through_other_spellings_and_a_symlink_is_the_same_data(tmp_path) -> None:
    image = tmp_path / "vol.raw"
    image.write_bytes(b"\0" * 4096)
    link = tmp_path / "link.raw"
    link.symlink_to(image)
    hard = tmp_path / "hard.raw"
    os.link(image, hard)
    spellings = [str(image), f"{tmp_path}//vol.raw", f"{tmp_path}/./vol.raw",
                 f"{tmp_path}/sub/../vol.raw".replace("/sub/..", "/."), str(link), str(hard)]
    identities = {data_identity(_file_disk(p)) for p in spellings}
    assert len(identities) == 1, identities
    other = tmp_path / "other.raw"
    other.write_bytes(b"\0")
    assert data_identity(_file_disk(str(other))) not in identities


def test_a_second_device_node_is_the_same_device(tmp_path) -> None:
    node = tmp_path / "null-again"
    os.mknod(node, 0o600 | stat.S_IFBLK, os.makedev(7, 200))
    twin = tmp_path / "twin"
    os.mknod(twin, 0o600 | stat.S_IFBLK, os.makedev(7, 200))
    assert data_identity(_block_disk(str(node))) == data_identity(_block_disk(str(twin))) == (
        "dev", "7:200")


def test_a_missing_path_is_compared_by_its_normalized_spelling(tmp_path) -> None:
    a = data_identity(_file_disk(f"{tmp_path}/gone//x.raw"))
    b = data_identity(_file_disk(f"{tmp_path}/./gone/x.raw"))
    assert a == b and a[0] == "path"


@pytest.mark.parametrize(("one", "other", "same"), [
    ("<host name='Ceph.Example' port='6789'/>", "<host name='ceph.example'/>", True),
    ("<host name='a' port='6789'/><host name='b' port='6789'/>",
     "<host name='b' port='6789'/><host name='a' port='6789'/>", True),
    ("<host name='a' port='6789'/>", "<host name='a' port='6790'/>", False),
])
def test_network_volumes_compare_by_protocol_name_and_hosts(one: str, other: str,
                                                             same: bool) -> None:
    def disk(hosts: str, name: str = "volumes/v1") -> Disk:
        return Disk.from_xml(f"<disk type='network' device='disk'><source protocol='rbd' "
                             f"name='{name}'>{hosts}</source><target dev='sda'/></disk>")

    assert (data_identity(disk(one)) == data_identity(disk(other))) is same
    assert data_identity(disk(one)) != data_identity(disk(one, "volumes/v2"))


def test_tokens_are_file_name_safe_and_distinct() -> None:
    a, b = identity_token(("dev", "7:1")), identity_token(("dev", "7:10"))
    assert a != b and a.isalnum() and len(a) == 32
