"""``virtdriver doctor`` and ``virtdriver audit`` on the enforcing hosts (issue #20, item 6).

doctor reports the security drivers libvirt runs, the SELinux mode, the policy's name and both
image contexts exactly as the host has them (read here independently: libvirt's capabilities,
sysfs, ``sestatus`` and the policy's own ``virtual_image_context``). audit reports a shared volume
whose attachments carry different label policies, read from the running guests' live XML.
"""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pytest

from testhosts.guests import read_pattern, write_pattern
from tests.nested.conftest import NESTED, run, secmodels
from tests.nested.selinux_support import SHARED, data_file, file_label, no_guest_denials
from tests.support.volumes import file_volume
from virtdriver import LibvirtVolumeDriver
from virtdriver.cli import main


def _doctor(capsys, tmp_path) -> tuple[dict, str]:
    main(["--state-dir", str(tmp_path / "state"), "doctor", "--json"])
    report = json.loads(capsys.readouterr().out)
    main(["--state-dir", str(tmp_path / "state"), "doctor"])
    return report["facts"], capsys.readouterr().out


def _sestatus() -> dict[str, str]:
    found = {}
    for line in run("sestatus").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            found[key.strip()] = value.strip()
    return found


@pytest.mark.lsm_selinux
def test_doctor_reports_the_selinux_host(system_conn, capsys, tmp_path) -> None:
    facts, text = _doctor(capsys, tmp_path)
    assert facts["security_drivers"] == secmodels(system_conn) == ["selinux", "dac"]
    status = _sestatus()
    assert status["Current mode"] == facts["selinux"]["mode"] == "enforcing"
    policy = status["Loaded policy name"]
    assert facts["selinux"]["policy"] == policy == "default"  # Debian's, not RHEL's 'targeted'
    context_file = Path("/etc/selinux", policy, "contexts", "virtual_image_context")
    assert facts["selinux"]["image_context_file"] == str(context_file)
    shared, readonly = [ln.strip() for ln in context_file.read_text().splitlines()
                        if ln.strip()][:2]
    assert facts["selinux"]["image_contexts"] == {"shared": shared, "readonly": readonly}
    assert (shared, readonly) == (SHARED, "system_u:object_r:virt_content_t:s0")
    assert "enforcing" in text
    assert f"policy {policy}: shared {shared}, read-only {readonly} ({context_file})" in text
    # The booleans the registered protocols declare, as getsebool has them (NFS: virt_use_nfs,
    # off in Debian 12's policy unless an operator turned it on).
    nfs = run("getsebool", "virt_use_nfs").split()[-1] == "on"
    assert facts["selinux"]["booleans"] == {"virt_use_nfs": nfs}
    assert f"virt_use_nfs {'on' if nfs else 'off'} (nfs)" in text


@pytest.mark.lsm_apparmor
def test_doctor_reports_the_apparmor_host(system_conn, capsys, tmp_path) -> None:
    assert NESTED == "apparmor"
    facts, text = _doctor(capsys, tmp_path)
    assert facts["security_drivers"] == secmodels(system_conn) == ["apparmor", "dac"]
    assert not Path("/sys/fs/selinux/enforce").exists()
    assert facts["selinux"] == {"mode": "disabled"}
    assert "apparmor, dac" in text and "not enabled on this host" in text


@pytest.mark.lsm_selinux
def test_audit_reports_mixed_label_policies_from_live_labels(guests, tmp_path, capsys,
                                                             audit_window) -> None:
    state = tmp_path / "state"
    qemu = pwd.getpwnam("libvirt-qemu")
    with data_file("vd-audit-") as path:
        # What 'none' expects: the operator made the data QEMU's and labelled it shared.
        os.chown(path, qemu.pw_uid, qemu.pw_gid)
        run("chcon", SHARED, path)
        info = file_volume(path, multiattach=True)
        vid = info["data"]["volume_id"]
        alias = f"ua-{vid}"
        a, b = guests.start("mix-a"), guests.start("mix-b")
        none = LibvirtVolumeDriver(state_dir=state, label_policy="none", detach_timeout=60)
        auto = LibvirtVolumeDriver(state_dir=state, label_policy="auto", detach_timeout=60)
        try:
            none.attach_volume(info, a.name(), attach_mode="rw")
            assert main(["--state-dir", str(state), "audit"]) == 0, capsys.readouterr().out
            capsys.readouterr()
            auto.attach_volume(info, b.name(), attach_mode="ro")
            assert file_label(path) == SHARED  # libvirt's shareable rule agrees this time
            write_pattern(a, alias, 0x4D)
            assert read_pattern(b, alias, 0x4D)

            assert main(["--state-dir", str(state), "audit", "--json"]) == 1
            report = json.loads(capsys.readouterr().out)
            [volume] = [v for v in report["volumes"] if v["volume"] == vid]
            kinds = [d["kind"] for d in volume["dangers"]]
            assert "labels" in kinds, volume
            assert main(["--state-dir", str(state), "audit"]) == 1
            out = capsys.readouterr().out
            assert "per-disk labels differ" in out, out
            assert f"{a.name()}: dac:relabel=no selinux:relabel=no" in out, out
            assert f"{b.name()}: none (libvirt decides)" in out, out
            auto.detach_volume(b.name(), vid)
            none.detach_volume(a.name(), vid)
        finally:
            none.close()
            auto.close()
        no_guest_denials(audit_window)
