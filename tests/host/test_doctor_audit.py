"""``virtdriver doctor`` and ``virtdriver audit`` against the real libvirtd and real guests.

Dangers are created for real: a loop device attached to a second guest behind the driver's back
without <shareable/>, labels that differ between two driver attachments, a host connection whose
guest disk was removed with a raw libvirt detach. Other tests may run guests on the same host at
the same time, so assertions look at the volumes created here.
"""

from __future__ import annotations

import json
from pathlib import Path

import libvirt
import pytest

from testhosts.guests import DeviceEvents, detach_and_wait
from tests.support.volumes import local_volume
from virtdriver.cli import main
from virtdriver.ops.audit import AuditAttachment, audit_host, dangers_of
from virtdriver.ops.doctor import STATUSES, image_contexts, security_models, selinux_mode

pytestmark = pytest.mark.hypervisor


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---- doctor -------------------------------------------------------------------------------------


def test_doctor_table_says_multiattach_works_here(system_conn, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "--state-dir", str(tmp_path / "state"), "doctor")
    assert code == 0, out + err
    assert err == ""
    lines = out.splitlines()
    header = lines[0]
    assert header.split() == ["AREA", "CHECK", "STATUS", "DETAIL"]
    status_at, detail_at = header.index("STATUS"), header.index("DETAIL")
    rows = [ln for ln in lines[2:] if ln.strip() and not ln.startswith("Multiattach")]
    for row in rows:  # aligned: every status and detail starts under its title
        assert row[status_at:].split()[0] in ("OK", "WARN", "FAIL"), row
        assert row[detail_at - 2:detail_at] == "  " and row[detail_at] != " ", row
    text = "\n".join(rows)
    for check in ("libvirt", "qemu", "multiattach", "kvm", "security drivers", "selinux",
                  "state dir", "mount base", "connector", "iscsi", "rbd", "nbd", "local",
                  "reservations"):
        assert f" {check} " in text, check
    assert "share-rw=on" in text
    assert "FAIL" not in text
    assert lines[-1].startswith("Multiattach works on this host")


def test_doctor_json_reports_every_check_and_the_facts(system_conn, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--state-dir", str(tmp_path / "state"), "doctor", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["multiattach"] is True and report["problems"] == []
    assert report["uri"] == "qemu:///system"
    assert all(c["status"] in STATUSES and c["detail"] and "\n" not in c["detail"]
               for c in report["checks"])
    facts = report["facts"]
    assert facts["capabilities"]["supports_multiattach"] is True
    assert facts["capabilities"]["qemu_share_rw"] is True
    assert facts["connector_properties"]["mode"] == "rw" and facts["connector_properties"]["host"]
    assert facts["security_drivers"] == security_models(system_conn.getCapabilities())
    assert facts["protocols"]["local"]["kernel"] is True
    assert facts["protocols"]["nbd"]["qemu"] is True  # QEMU's nbd driver is built in
    assert facts["kvm"]["domain_capabilities"] in (True, False)
    # SCSI reservations: this host's QEMU has libiscsi and qemu-pr-helper (setup-host.sh)
    assert facts["reservations"]["qemu_native_iscsi"] is True
    assert facts["reservations"]["host_block_devices"] is True
    [check] = [c for c in report["checks"] if c["name"] == "reservations"]
    assert check["status"] == "ok" and "host block devices: yes" in check["detail"]


def test_doctor_fails_when_locks_cannot_be_taken(system_conn, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, out, _ = run_cli(capsys, "--state-dir", str(blocker / "state"), "doctor")
    assert code == 1
    assert "Multiattach cannot work on this host:" in out
    assert f"- state dir: {blocker / 'state'} is not writable" in out


def test_doctor_fails_without_libvirt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"qemu+unix:///system?socket={tmp_path}/no-such.sock"
    code, out, _ = run_cli(capsys, "-c", uri, "--state-dir", str(tmp_path), "doctor", "--json")
    assert code == 1
    report = json.loads(out)
    assert report["multiattach"] is False
    assert report["problems"][0].startswith("libvirt: cannot connect to libvirt at")


def test_selinux_facts_are_read_from_the_files(tmp_path: Path) -> None:
    enforce = tmp_path / "enforce"
    enforce.write_text("1\n")
    assert selinux_mode(enforce) == "enforcing"
    enforce.write_text("0\n")
    assert selinux_mode(enforce) == "permissive"
    contexts = tmp_path / "virtual_image_context"
    contexts.write_text("system_u:object_r:svirt_image_t:s0\nsystem_u:object_r:virt_content_t:s0\n")
    assert image_contexts(contexts) == {"shared": "system_u:object_r:svirt_image_t:s0",
                                        "readonly": "system_u:object_r:virt_content_t:s0"}
    assert image_contexts(tmp_path / "missing") == {}


# ---- audit --------------------------------------------------------------------------------------


def test_audit_clean_multiattach_volume_has_no_danger(guests, volume_driver, loop_device,
                                                      system_conn, capsys) -> None:
    a, b = guests.start("a"), guests.start("b")
    info = local_volume(loop_device.device, multiattach=True)
    vid = info["data"]["volume_id"]
    volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    volume_driver.attach_volume(info, b.name(), attach_mode="ro")

    report = audit_host(system_conn, volume_driver.state_dir)
    volume = report.volume(vid)
    assert volume is not None and volume.dangers == []
    assert volume.guests == sorted([a.name(), b.name()])
    assert volume.host_connection and volume.source == loop_device.device
    assert {(x.guest, x.mode, x.shareable, x.cache, x.state) for x in volume.attachments} == {
        (a.name(), "rw", True, "none", "live+config"),
        (b.name(), "ro", True, "none", "live+config")}

    _, out, _ = run_cli(capsys, "--state-dir", str(volume_driver.state_dir), "audit")
    block = _volume_block(out, vid)
    assert "host connection recorded" in block[0]
    assert block[1].split() == ["Guest", "Device", "Mode", "Shareable", "Cache", "Format",
                                "Labels", "State"]
    assert not any("DANGER" in line for line in block)


def test_audit_reports_a_device_shared_without_shareable(guests, volume_driver, loop_device,
                                                         system_conn, capsys) -> None:
    a, b = guests.start("a"), guests.start("b")
    info = local_volume(loop_device.device, multiattach=True)
    vid = info["data"]["volume_id"]
    volume_driver.attach_volume(info, a.name(), attach_mode="rw")
    # behind the driver's back: the same block device, no <shareable/>, host page cache on
    b.attachDeviceFlags(f"""<disk type='block' device='disk'>
      <driver name='qemu' type='raw' cache='writeback'/>
      <source dev='{loop_device.device}'/><target dev='sdb' bus='scsi'/></disk>""",
                        libvirt.VIR_DOMAIN_AFFECT_LIVE)

    volume = audit_host(system_conn, volume_driver.state_dir).volume(vid)
    assert volume is not None
    assert volume.guests == sorted([a.name(), b.name()])
    kinds = {d.kind: d.message for d in volume.dangers}
    assert set(kinds) == {"unshared", "cache"}
    assert f"not <shareable/> in {b.name()}" in kinds["unshared"]
    assert f"{b.name()} (cache=writeback)" in kinds["cache"]
    raw = next(x for x in volume.attachments if x.guest == b.name())
    assert (raw.state, raw.device) == ("live", "sdb")
    assert not (raw.alias or "").startswith("ua-")  # found by its data, not by our alias

    code, out, _ = run_cli(capsys, "--state-dir", str(volume_driver.state_dir), "audit")
    assert code == 1
    block = _volume_block(out, vid)
    assert any(line.startswith("  DANGER unshared:") for line in block)
    code, out, _ = run_cli(capsys, "--state-dir", str(volume_driver.state_dir), "audit", "--json")
    assert code == 1
    report = json.loads(out)
    assert report["danger"] is True
    entry = next(v for v in report["volumes"] if v["volume"] == vid)
    assert {d["kind"] for d in entry["dangers"]} == {"unshared", "cache"}


def test_audit_reports_labels_that_differ(guests, volume_driver, loop_device, system_conn,
                                          tmp_path) -> None:
    from virtdriver import LibvirtVolumeDriver

    a, b = guests.start("a"), guests.start("b")
    info = local_volume(loop_device.device, multiattach=True)
    vid = info["data"]["volume_id"]
    volume_driver.attach_volume(info, a.name())  # label_policy auto: libvirt decides
    unlabelled = LibvirtVolumeDriver("qemu:///system", state_dir=volume_driver.state_dir,
                                     label_policy="none")
    try:
        unlabelled.attach_volume(info, b.name(), attach_mode="ro")
    finally:
        unlabelled.close()

    volume = audit_host(system_conn, volume_driver.state_dir).volume(vid)
    assert volume is not None
    assert [d.kind for d in volume.dangers] == ["labels"]
    labels = {x.guest: x.labels for x in volume.attachments}
    assert labels[a.name()] == ()
    models = security_models(system_conn.getCapabilities())  # only the host's are written
    assert labels[b.name()] == tuple(f"{m}:relabel=no" for m in ("dac", "selinux")
                                     if m in models)
    assert labels[b.name()]  # dac at least: libvirt always runs it beside 'none'


def test_audit_reports_a_leaked_host_connection(guests, volume_driver, loop_device,
                                                system_conn, capsys) -> None:
    a = guests.start("a")
    info = local_volume(loop_device.device, multiattach=False)
    vid = info["data"]["volume_id"]
    attachment = volume_driver.attach_volume(info, a.name())
    # the guest's disk goes away behind the driver's back: nothing will disconnect the host now
    disk = next(d for d in _disk_xmls(a) if f"ua-{vid}" in d)
    with DeviceEvents(system_conn) as events:
        detach_and_wait(events, a, disk, f"ua-{vid}")
    a.detachDeviceFlags(disk, libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    assert volume_driver.list_attachments(a.name()) == []
    assert attachment.volumeId in volume_driver.records.connected()

    report = audit_host(system_conn, volume_driver.state_dir)
    volume = report.volume(vid)
    assert volume is not None and volume.attachments == []
    assert [d.kind for d in volume.dangers] == ["leak"]
    assert volume.source == f"LOCAL {loop_device.device}"

    code, out, _ = run_cli(capsys, "--state-dir", str(volume_driver.state_dir), "audit")
    assert code == 1
    block = _volume_block(out, vid)
    assert "(no guest uses it)" in block[1]
    assert block[2].startswith("  DANGER leak: the host is still connected")


def test_shared_read_write_image_formats_are_a_danger() -> None:
    # libvirt 9 refuses to define or attach one, so it is checked on data: older hosts allow it
    def att(guest: str, mode: str, fmt: str) -> AuditAttachment:
        return AuditAttachment(guest, guest, "sda", mode, True, "none", fmt, (), None, "/v",
                               "live")

    assert [d.kind for d in dangers_of([att("a", "rw", "qcow2")])] == ["format"]
    assert dangers_of([att("a", "rw", "raw"), att("b", "ro", "raw")]) == []
    assert dangers_of([att("a", "ro", "qcow2"), att("b", "ro", "qcow2")]) == []


def _disk_xmls(dom: libvirt.virDomain) -> list[str]:
    from virtdriver.hypervisor.domains import domain_disks

    return [u.disk.to_xml() for u in domain_disks(dom) if u.live]


def _volume_block(out: str, vid: str) -> list[str]:
    """The lines of one volume in audit's human output (title to blank line)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"Volume {vid}"))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]
