"""The attach policy as a truth table."""

from __future__ import annotations

import itertools

import pytest

from virtdriver.config import Disk, Driver, SecLabel, Source
from virtdriver.errors import InvalidAttachMode, InvalidConnectionInfo, MultiattachNotSupported
from virtdriver.errors import InvalidRenderOption, UnsafeAttachment
from virtdriver.policy import (
    apply_policy,
    check_attach_mode,
    check_block_device_attach_mode,
    effective_attach_mode,
    shared_image_label,
)

SHARED = "system_u:object_r:svirt_image_t:s0"


def disk(fmt: str = "raw", cache: str = "none", io: str | None = "native",
         kind: str = "block") -> Disk:
    source = Source(dev="/dev/loop0") if kind == "block" else Source(protocol="rbd", name="p/i")
    return Disk(type=kind, driver=Driver(name="qemu", type=fmt, cache=cache, io=io),
                source=source)


@pytest.mark.parametrize("requested, access_mode, expected", [
    ("rw", None, "rw"), ("rw", "rw", "rw"), ("rw", "ro", "ro"),
    ("ro", None, "ro"), ("ro", "rw", "ro"), ("ro", "ro", "ro"),
])
def test_effective_mode_ro_wins(requested: str, access_mode: str | None, expected: str) -> None:
    assert effective_attach_mode(requested, access_mode) == expected


@pytest.mark.parametrize("mode", ["RO", "r", "", None, 1, "rw ", "read-only"])
def test_attach_mode_is_exactly_ro_or_rw(mode: object) -> None:
    with pytest.raises(InvalidAttachMode, match="is not an attach mode"):
        check_attach_mode(mode)


def test_invalid_access_mode_is_an_error() -> None:
    with pytest.raises(InvalidConnectionInfo, match="data.access_mode"):
        effective_attach_mode("rw", "wo")


# (format, cache, io, mode, multiattach) -> (readonly, shareable, cache, io) or an error type
@pytest.mark.parametrize("fmt, cache, io, mode, multi", list(itertools.product(
    ["raw", "qcow2"], ["none", "writeback"], ["native", None], ["rw", "ro"], [False, True])))
def test_truth_table(fmt: str, cache: str, io: str | None, mode: str, multi: bool) -> None:
    d = disk(fmt, cache, io)
    if multi and mode == "rw" and fmt != "raw":
        with pytest.raises(MultiattachNotSupported, match="shared read-write"):
            apply_policy(d, attach_mode=mode, multiattach=multi, host_attached=True)
        return
    apply_policy(d, attach_mode=mode, multiattach=multi, host_attached=True)
    assert d.readonly is (mode == "ro")
    assert d.shareable is multi
    assert d.driver is not None
    expected_cache = "none" if multi else cache
    assert d.driver.cache == expected_cache
    if io is None:
        assert d.driver.io is None
    else:
        assert d.driver.io == ("native" if expected_cache == "none" else "threads")
    assert d.source is not None and d.source.seclabels == []


def test_encryption_and_multiattach_are_refused_together() -> None:
    with pytest.raises(MultiattachNotSupported, match="encrypted"):
        apply_policy(disk(), attach_mode="ro", multiattach=True, host_attached=True,
                     encrypted=True)
    apply_policy(disk(), attach_mode="rw", multiattach=False, host_attached=True, encrypted=True)


def test_shareable_without_multiattach_is_refused() -> None:
    d = disk()
    d.shareable = True  # as a misbehaving plugin driver might
    with pytest.raises(MultiattachNotSupported, match="not multiattach"):
        apply_policy(d, attach_mode="rw", multiattach=False, host_attached=True)


@pytest.mark.parametrize("policy, multi, host, expected", [
    ("auto", True, True, []),
    ("auto", False, True, []),
    ("explicit", True, True, [SecLabel(model="selinux", relabel="yes", label=SHARED)]),
    ("explicit", False, True, []),
    ("explicit", True, False, []),
    ("none", False, True, [SecLabel(model="selinux", relabel="no"),
                           SecLabel(model="dac", relabel="no")]),
    ("none", True, False, []),
])
def test_label_policies(policy: str, multi: bool, host: bool, expected: list[SecLabel]) -> None:
    d = disk(kind="block" if host else "network")
    apply_policy(d, attach_mode="rw", multiattach=multi, host_attached=host,
                 label_policy=policy, shared_label=SHARED)
    assert d.source is not None and d.source.seclabels == expected


def test_unknown_label_policy_is_refused() -> None:
    # A mistyped setting is bad input (exit 2), not a refusal by the policy.
    with pytest.raises(InvalidRenderOption, match="label_policy 'selinux'"):
        apply_policy(disk(), attach_mode="rw", multiattach=False, host_attached=True,
                     label_policy="selinux")


def test_shared_label_comes_from_the_policy_file(tmp_path) -> None:
    ctx = tmp_path / "virtual_image_context"
    ctx.write_text("system_u:object_r:svirt_image_t:s0\nsystem_u:object_r:virt_content_t:s0\n")
    assert shared_image_label(None, ctx) == "system_u:object_r:svirt_image_t:s0"
    assert shared_image_label("custom_t", ctx) == "custom_t"
    with pytest.raises(UnsafeAttachment, match="needs the shared image SELinux context"):
        shared_image_label(None, tmp_path / "missing")


@pytest.mark.parametrize("bdm, ok", [
    ({"source_type": "volume", "destination_type": "volume", "attach_mode": "ro"}, True),
    ({"source_type": "image", "destination_type": "volume", "attach_mode": "rw"}, True),
    ({"source_type": "image", "destination_type": "local"}, True),
    ({"source_type": "image", "destination_type": "local", "attach_mode": "ro"}, False),
    ({"source_type": "blank", "destination_type": "local", "guest_format": "swap",
      "attach_mode": "rw"}, False),
])
def test_attach_mode_only_on_volumes(bdm: dict, ok: bool) -> None:
    if ok:
        check_block_device_attach_mode(bdm)
    else:
        with pytest.raises(InvalidAttachMode, match="local or ephemeral"):
            check_block_device_attach_mode(bdm)
