"""The attach policy as a truth table."""

from __future__ import annotations

import itertools

import pytest

from virtdriver.config import Disk, Driver, SecLabel, Source
from virtdriver.errors import (
    InvalidAttachMode,
    InvalidConnectionInfo,
    InvalidRenderOption,
    MultiattachNotSupported,
    UnsafeAttachment,
)
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


NONE_SELINUX = SecLabel(model="selinux", relabel="no")
NONE_DAC = SecLabel(model="dac", relabel="no")


@pytest.mark.parametrize("models, expected", [
    (None, [NONE_SELINUX, NONE_DAC]),             # rendered for no host in particular
    (("selinux", "dac"), [NONE_SELINUX, NONE_DAC]),  # RHEL-family host
    (("apparmor", "dac"), [NONE_DAC]),            # Ubuntu host: no model libvirt does not run
    (("dac",), [NONE_DAC]),
    ((), []),                                     # security_driver = "none"
])
def test_label_policy_none_names_only_the_hosts_models(models, expected) -> None:
    # libvirt refuses to start a guest whose definition names a security model it does not run
    # ("Security driver model 'selinux' is not available"), though it takes it at hot-plug.
    d = disk(kind="block")
    apply_policy(d, attach_mode="rw", multiattach=True, host_attached=True,
                 label_policy="none", security_models=models)
    assert d.source is not None and d.source.seclabels == expected


@pytest.mark.parametrize("models", [("apparmor", "dac"), ("dac",), ()])
def test_explicit_without_selinux_is_refused_naming_the_drivers(models) -> None:
    drivers = ", ".join(models) or "none"
    for shareable, host in [(True, True), (False, True), (True, False)]:
        with pytest.raises(UnsafeAttachment, match=f"security drivers: {drivers}\\)"):
            apply_policy(disk(kind="block" if host else "network"), attach_mode="rw",
                         multiattach=shareable, host_attached=host, label_policy="explicit",
                         shared_label=SHARED, security_models=models)


def test_explicit_with_selinux_pins_the_shared_context() -> None:
    d = disk(kind="block")
    apply_policy(d, attach_mode="ro", multiattach=True, host_attached=True,
                 label_policy="explicit", shared_label=SHARED,
                 security_models=("selinux", "dac"))
    assert d.source is not None
    assert d.source.seclabels == [SecLabel(model="selinux", relabel="yes", label=SHARED)]


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


@pytest.mark.parametrize("config, policy", [
    ("SELINUX=enforcing\nSELINUXTYPE=default\n", "default"),  # Debian
    ("SELINUX=enforcing\nSELINUXTYPE=targeted\n", "targeted"),  # RHEL
    ("# comment\nSELINUXTYPE = mls \n", "mls"),
    ("SELINUX=permissive\n", "targeted"),  # libselinux's default
    (None, "targeted"),
])
def test_context_file_follows_the_policy_in_force(tmp_path, config, policy) -> None:
    from virtdriver.selinux import image_contexts, policy_name, virtual_image_context_path

    if config is not None:
        (tmp_path / "config").write_text(config)
    assert policy_name(tmp_path / "config") == policy
    path = virtual_image_context_path(tmp_path)
    assert path == tmp_path / policy / "contexts" / "virtual_image_context"
    path.parent.mkdir(parents=True)
    path.write_text("system_u:object_r:svirt_image_t:s0\nsystem_u:object_r:virt_content_t:s0\n")
    assert image_contexts(path) == {"shared": "system_u:object_r:svirt_image_t:s0",
                                    "readonly": "system_u:object_r:virt_content_t:s0"}
    assert shared_image_label(None, path) == "system_u:object_r:svirt_image_t:s0"


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
