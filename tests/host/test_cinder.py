"""A real Cinder (scripts/test-cinder.sh: one process, sqlite, noauth, RBD on the test Ceph):
attachments made through Cinder's attachments API with this host's connector, attached to real
guests by virtdriver straight from what Cinder returned, and given back."""

from __future__ import annotations

import base64
import json
import secrets
import shlex
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testhosts.guests import block_info, read_pattern, write_pattern
from tests.support import ROOT
from tests.support.backends import need
from tests.support.sharedio import writer_shares_with_reader
from virtdriver import LibvirtVolumeDriver
from virtdriver.cinder.client import Cinder
from virtdriver.errors import CinderError, PolicyRefusal, SharedWriteRefused
from virtdriver.render import build_disk

pytestmark = pytest.mark.hypervisor
SCRIPT = ROOT / "scripts" / "test-cinder.sh"


@pytest.fixture(scope="module")
def cinder(backends) -> Cinder:
    done = subprocess.run([str(SCRIPT), "env"], capture_output=True, text=True, check=False)
    env = {}
    for line in done.stdout.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = shlex.split(value)[0] if value else ""
    backends.update(env)
    need(backends, "ceph")
    need(backends, "cinder")
    return Cinder(env["VD_CINDER_URL"])


@pytest.fixture(scope="module")
def cinder_secret(cinder, backends) -> Iterator[str]:
    """The libvirt ceph secret named by Cinder's rbd_secret_uuid (what a compute host defines)."""
    import libvirt

    uid = backends["VD_CINDER_SECRET_UUID"]
    conn = libvirt.open("qemu:///system")
    secret = conn.secretDefineXML(
        f"<secret ephemeral='no' private='yes'><uuid>{uid}</uuid><usage type='ceph'>"
        f"<name>virtdriver-test-cinder</name></usage></secret>", 0)
    secret.setValue(base64.b64decode(backends["VD_CEPH_CLIENT_KEY"]), 0)
    yield uid
    secret.undefine()
    conn.close()


@pytest.fixture(scope="module")
def multiattach_type(cinder) -> Iterator[str]:
    made = cinder.call("POST", "/types", {"volume_type": {
        "name": f"vd-multiattach-{uuid.uuid4().hex[:8]}",
        "extra_specs": {"multiattach": "<is> True"}}})["volume_type"]
    yield made["id"]
    cinder.call("DELETE", f"/types/{made['id']}")


def new_volume(cinder: Cinder, volume_type: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"size": 1, "name": f"vd-test-{uuid.uuid4().hex[:8]}"}
    if volume_type:
        body["volume_type"] = volume_type
    vid = cinder.call("POST", "/volumes", {"volume": body})["volume"]["id"]
    return cinder.wait_volume(vid, ("available",))


@pytest.fixture
def volume_driver_here(tmp_path) -> LibvirtVolumeDriver:
    return LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state")


def with_multiattach(record: dict[str, Any], volume: dict[str, Any]) -> dict[str, Any]:
    """What nova adds beside Cinder's answer: the volume's own multiattach flag."""
    return {"attachment": dict(record["attachment"], multiattach=volume["multiattach"])}


def test_cinder_multiattach_rw_and_ro(cinder, cinder_secret, multiattach_type, guests,
                                      volume_driver_here) -> None:
    driver = volume_driver_here
    vol = new_volume(cinder, multiattach_type)
    vid = vol["id"]
    assert vol["multiattach"] is True
    made: list[str] = []
    try:
        # one at a time, as nova does: Cinder reserves a volume only when it is available or
        # in-use, and an attachment with a connector leaves it 'attaching' until completed
        a, b = guests.start("a"), guests.start("b")
        alias = f"ua-{vid}"
        rw = cinder.create_attachment(vid, driver.connector_properties("rw"), "rw")
        made.append(rw["attachment"]["id"])
        assert "data" not in rw["attachment"]["connection_info"]  # the flat form
        driver.attach_volume(with_multiattach(rw, vol), a.name())
        cinder.complete_attachment(rw["attachment"]["id"])
        ro = cinder.create_attachment(vid, driver.connector_properties("ro"), "ro")
        made.append(ro["attachment"]["id"])
        assert ro["attachment"]["attach_mode"] == "ro"
        driver.attach_volume(with_multiattach(ro, vol), b.name())
        cinder.complete_attachment(ro["attachment"]["id"])
        assert cinder.volume(vid)["status"] == "in-use"

        # every shape of the same attachment renders the same disk; ro with no attach mode
        flat = rw["attachment"]["connection_info"]
        shapes = [flat, rw, rw["attachment"],
                  {"driver_volume_type": flat["driver_volume_type"], "data": flat,
                   "serial": vid},
                  {"driver_volume_type": flat["driver_volume_type"], "data": flat}]
        assert len({build_disk(s, bus="scsi", target_dev="sdb").to_xml() for s in shapes}) == 1
        assert "<readonly/>" in build_disk(ro).to_xml()
        assert "<readonly/>" not in build_disk(rw).to_xml()
        assert flat["access_mode"] == "rw"  # Cinder's, even for ro: the record's mode decides
        documented = (ROOT / "docs" / "cinder.md").read_text()
        sent = list(flat) + list(rw["attachment"])
        assert [k for k in sent if f"`{k}`" not in documented] == []  # each used or ignored

        assert block_info(b, alias).ro and not block_info(a, alias).ro
        writer_shares_with_reader(a, b, alias)

        driver.detach_volume(a.name(), vid)
        driver.detach_volume(b.name(), vid)
        assert driver.records.connected() == []
        for att in list(made):
            cinder.delete_attachment(att)
            made.remove(att)
        assert cinder.wait_volume(vid, ("available",))["attachments"] == []
    finally:
        for att in made:
            cinder.delete_attachment(att)
        cinder.wait_volume(vid, ("available", "error"))
        cinder.call("DELETE", f"/volumes/{vid}")


def test_cinder_refuses_a_second_attachment_of_a_plain_volume(cinder, cinder_secret, guests,
                                                              volume_driver_here) -> None:
    driver = volume_driver_here
    vol = new_volume(cinder)
    vid = vol["id"]
    assert vol["multiattach"] is False
    first = cinder.create_attachment(vid, driver.connector_properties("rw"), "rw")
    try:
        a, b = guests.start("a"), guests.start("b")
        doc = with_multiattach(first, vol)
        driver.attach_volume(doc, a.name())
        cinder.complete_attachment(first["attachment"]["id"])
        assert cinder.volume(vid)["status"] == "in-use"
        with pytest.raises(CinderError, match="refused POST /attachments: 400"):
            cinder.create_attachment(vid, driver.connector_properties("rw"), "rw")
        # handed the one attachment twice anyway, virtdriver refuses to share it
        with pytest.raises(PolicyRefusal):
            driver.attach_volume(doc, b.name())
        driver.detach_volume(a.name(), vid)
        assert driver.records.connected() == []
    finally:
        cinder.delete_attachment(first["attachment"]["id"])
        cinder.wait_volume(vid, ("available",))
        cinder.call("DELETE", f"/volumes/{vid}")


def cli(*argv: str) -> int:
    from virtdriver.cli import main

    return main(list(argv))


def test_cinder_flow_without_a_compute_service(cinder, cinder_secret, multiattach_type, guests,
                                               tmp_path, capsys) -> None:
    """virtdriver attach --cinder / detach: Cinder's attachments follow the guests."""
    from virtdriver.cinder import flow as cinder_flow

    vid = new_volume(cinder, multiattach_type)["id"]
    state = ["--state-dir", str(tmp_path / "state")]
    a, b = guests.start("a"), guests.start("b")
    try:
        assert cli(*state, "connector", "--attach-mode", "ro") == 0
        assert json.loads(capsys.readouterr().out)["mode"] == "ro"
        assert cli(*state, "attach", a.name(), "--cinder", cinder.url, "--volume", vid) == 0
        assert cli(*state, "attach", b.name(), "--cinder", cinder.url, "--volume", vid,
                   "--attach-mode", "ro") == 0
        vol = cinder.volume(vid)
        assert vol["status"] == "in-use" and len(vol["attachments"]) == 2
        alias = f"ua-{vid}"
        assert block_info(b, alias).ro and not block_info(a, alias).ro
        pattern = secrets.randbelow(200) + 20
        write_pattern(a, alias, pattern)
        assert read_pattern(b, alias, pattern)
        driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "state")
        remembered = {cinder_flow.recall(driver, g.name(), vid)[0] for g in (a, b)}
        assert remembered == {x["attachment_id"] for x in vol["attachments"]}

        def cinder_dangers() -> list[str]:
            capsys.readouterr()
            cli(*state, "audit", "--json", "--cinder", cinder.url)
            report = json.loads(capsys.readouterr().out)
            return [d["message"] for v in report["volumes"] if v["volume"] == vid
                    for d in v["dangers"] if d["kind"] == "cinder"]

        assert cinder_dangers() == []
        b_att = cinder_flow.recall(driver, b.name(), vid)[0]
        cinder.delete_attachment(b_att)  # behind the guest's back
        assert any("no longer has" in m and b.name() in m for m in cinder_dangers())

        assert cli(*state, "detach", a.name(), vid) == 0
        assert len(cinder.volume(vid)["attachments"]) == 0
        assert cli(*state, "detach", b.name(), vid) == 0  # its attachment is already gone: fine
        assert "Cinder attachment" in capsys.readouterr().out
        assert cinder_dangers() == []
        assert cinder.wait_volume(vid, ("available",))["attachments"] == []
        assert cinder_flow.attachments(driver, a.name()) == {}

        # any failure deletes the attachment again: here libvirt refuses the guest's bus
        assert cli(*state, "attach", a.name(), "--cinder", cinder.url, "--volume", vid,
                   "--bus", "ide") != 0
        assert cinder.wait_volume(vid, ("available",))["attachments"] == []
        assert cli(*state, "attach", a.name(), "--cinder", cinder.url, "--volume", vid,
                   "--attach-mode", "wo") == 2
        assert cinder.volume(vid)["attachments"] == []
    finally:
        for att in cinder.volume(vid)["attachments"]:
            cinder.delete_attachment(att["attachment_id"])
        cinder.wait_volume(vid, ("available", "error"))
        cinder.call("DELETE", f"/volumes/{vid}")


def run_printed(command: str) -> subprocess.CompletedProcess[str]:
    """A command virtdriver printed, run as an operator would (this venv's virtdriver)."""
    import os
    import sys

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(command, shell=True, capture_output=True, text=True, check=False,
                          env=env)


def test_extend_fix_for_a_read_only_guest_keeps_cinders_attachment(
        cinder, cinder_secret, multiattach_type, backends, guests, tmp_path) -> None:
    """extend names the ro guest its RBD node cannot reopen; the printed fix, run as printed,
    brings it up to date AND leaves Cinder an attachment for it (a new one, ro), with the
    disk's own cache and error policies."""
    import sys

    vid = new_volume(cinder, multiattach_type)["id"]
    state = tmp_path / "state"
    a, b = guests.start("xa"), guests.start("xb")
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=state)
    try:
        base = ["--state-dir", str(state), "attach"]
        assert cli(*base, a.name(), "--cinder", cinder.url, "--volume", vid) == 0
        assert cli(*base, b.name(), "--cinder", cinder.url, "--volume", vid,
                   "--attach-mode", "ro", "--cache", "directsync", "--error-policy",
                   "report") == 0
        a_att = cinder_flow_note(driver, a.name(), vid)
        record = tmp_path / "volume.json"
        record.write_text(json.dumps(cinder.call("GET", f"/attachments/{a_att}")))
        image = cinder.call("GET", f"/attachments/{a_att}")["attachment"][
            "connection_info"]["name"]
        subprocess.run(["rbd", "-c", backends["VD_CEPH_CONF"], "--keyring",
                        backends["VD_CEPH_ADMIN_KEYRING"], "resize", "--size", "2048M", image],
                       check=True, capture_output=True, text=True)
        done = subprocess.run([sys.executable, "-m", "virtdriver", "--state-dir", str(state),
                               "extend", str(record), "--size", "2G"],
                              capture_output=True, text=True, check=False)
        assert done.returncode == 1, done.stderr
        (line,) = done.stderr.splitlines()
        assert f"{b.name()} shows {1 << 30} bytes" in line
        expected = (f"virtdriver --state-dir {state} detach {b.name()} {vid} && virtdriver "
                    f"--state-dir {state} attach {b.name()} --cinder {cinder.url} --volume "
                    f"{vid} --attach-mode ro --cache directsync --error-policy report")
        assert expected in line, line
        fixed = run_printed(line.split("detach and attach it again through Cinder: ", 1)[1])
        assert fixed.returncode == 0, fixed.stderr

        alias = f"ua-{vid}"
        assert block_info(b, alias).ro and not block_info(a, alias).ro
        (att,) = driver.list_attachments(b.name())
        assert b.blockInfo(att.device.removeprefix("/dev/"))[0] == 2 << 30
        assert (att.cache, att.error_policy) == ("directsync", "report")
        b_att = cinder_flow_note(driver, b.name(), vid)
        attached = {x["attachment_id"] for x in cinder.volume(vid)["attachments"]}
        assert attached == {a_att, b_att}  # Cinder still knows both guests
        assert cinder.call("GET", f"/attachments/{b_att}")["attachment"]["attach_mode"] == "ro"
        assert cinder_dangers(state, cinder, vid) == []
        assert cli("--state-dir", str(state), "detach", a.name(), vid) == 0
        assert cinder.volume(vid)["status"] == "in-use"  # B's use is still counted
        assert cli("--state-dir", str(state), "detach", b.name(), vid) == 0
        assert cinder.wait_volume(vid, ("available",))["attachments"] == []
    finally:
        cleanup_volume(cinder, vid)


def test_audit_advice_after_a_swap_away_from_a_cinder_volume_works(
        cinder, cinder_secret, guests, tmp_path) -> None:
    """After a swap away from a volume attached with --cinder, audit names the attachment
    left in Cinder and its advice, run as printed, deletes it (exit 0)."""
    import shlex as shell

    old, new = new_volume(cinder)["id"], new_volume(cinder)["id"]
    state = tmp_path / "state"
    a = guests.start("sw")
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=state)
    made = []
    try:
        assert cli("--state-dir", str(state), "attach", a.name(), "--cinder", cinder.url,
                   "--volume", old) == 0
        old_att = cinder_flow_note(driver, a.name(), old)
        old_file, new_file = tmp_path / "old.json", tmp_path / "new.json"
        old_file.write_text(json.dumps(cinder.call("GET", f"/attachments/{old_att}")))
        record = cinder.create_attachment(new, driver.connector_properties("rw"), "rw")
        made.append(record["attachment"]["id"])
        new_file.write_text(json.dumps(record))
        assert cli("--state-dir", str(state), "swap", a.name(), str(old_file),
                   str(new_file)) == 0
        cinder.complete_attachment(made[0])

        (danger,) = cinder_dangers(state, cinder, old)
        assert old_att in danger and "no longer has the disk" in danger
        advice = danger.split("'")[1]  # the command the danger names, quoted
        assert advice == f"virtdriver detach {a.name()} {old}"
        argv = shell.split(advice)
        fixed = run_printed(shell.join([argv[0], "--state-dir", str(state), *argv[1:]]))
        assert fixed.returncode == 0, fixed.stderr
        assert f"Cinder attachment {old_att} deleted" in fixed.stdout
        assert cinder.wait_volume(old, ("available",))["attachments"] == []
        assert cinder_dangers(state, cinder, old) == []
        assert [x.volumeId for x in driver.list_attachments(a.name())] == [new]
        driver.detach_volume(a.name(), new)
    finally:
        for att in made:
            cinder.delete_attachment(att, missing_ok=True)
        cleanup_volume(cinder, old)
        cleanup_volume(cinder, new)


def cinder_flow_note(driver: LibvirtVolumeDriver, guest: str, vid: str) -> str:
    """The Cinder attachment id ``attach --cinder`` remembered in the guest."""
    from virtdriver.cinder import flow as cinder_flow

    note = cinder_flow.recall(driver, guest, vid)
    assert note is not None
    return note[0]


def cinder_dangers(state: Path, cinder: Cinder, vid: str) -> list[str]:
    """``audit --cinder``'s ``cinder`` dangers of one volume (run in a child process)."""
    import sys

    done = subprocess.run([sys.executable, "-m", "virtdriver", "--state-dir", str(state),
                           "audit", "--json", "--cinder", cinder.url],
                          capture_output=True, text=True, check=False)
    report = json.loads(done.stdout)
    return [d["message"] for v in report["volumes"] if v["volume"] == vid
            for d in v["dangers"] if d["kind"] == "cinder"]


def cleanup_volume(cinder: Cinder, vid: str) -> None:
    """Delete whatever attachments remain, then the volume, and wait until it is gone (its
    volume type can be deleted then)."""
    import time

    for att in cinder.volume(vid)["attachments"]:
        cinder.delete_attachment(att["attachment_id"], missing_ok=True)
    cinder.wait_volume(vid, ("available", "error"))
    cinder.call("DELETE", f"/volumes/{vid}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            cinder.volume(vid)
        except CinderError as exc:
            if exc.status == 404:
                return
            raise
        time.sleep(0.2)


def test_cinder_writers_on_other_hosts_count(cinder, cinder_secret, multiattach_type, guests,
                                             tmp_path, caplog) -> None:
    """A read-write attachment Cinder has for another compute host is a writer the guard
    counts: an ext4 volume's first writer here is refused (exit 3 on the CLI), unless
    --allow-shared-write; a read-only one elsewhere, or a reader here, is not refused."""
    import logging

    from testhosts.guests import LoopDevice
    from tests.support.volumes import local_volume
    from virtdriver.cinder import flow as cinder_flow

    vid = new_volume(cinder, multiattach_type)["id"]
    state = tmp_path / "state"
    driver = LibvirtVolumeDriver("qemu:///system", state_dir=state)
    here = driver.connector_properties("rw")
    other = dict(here, host="vd-other-node.test")
    a, b, c = guests.start("wa"), guests.start("wb"), guests.start("wc")
    try:
        ro = cinder.create_attachment(vid, dict(other, mode="ro"), "ro")["attachment"]["id"]
        cinder.complete_attachment(ro)
        assert cinder_flow.writers_elsewhere(driver, cinder, cinder.volume(vid),
                                             here["host"]) == []  # a reader elsewhere
        rw = cinder.create_attachment(vid, other, "rw")["attachment"]["id"]
        cinder.complete_attachment(rw)
        elsewhere = cinder_flow.writers_elsewhere(driver, cinder, cinder.volume(vid),
                                                  here["host"])
        assert elsewhere == [f"attachment {rw} on vd-other-node.test"]

        # the guard reads what the volume holds on this host: here an ext4 on a loop device
        # standing in for the volume's data, the writers elsewhere as Cinder named them
        with LoopDevice(64 << 20) as loop:
            subprocess.run(["mkfs.ext4", "-q", "-F", loop.device], check=True,
                           capture_output=True)
            info = local_volume(loop.device, multiattach=True, volume_id=vid)
            with pytest.raises(SharedWriteRefused, match=rf"holds ext4.*attachment {rw} on "
                                                         r"vd-other-node\.test"):
                driver.attach_volume(info, a.name(), writers_elsewhere=elsewhere)
            assert driver.list_attachments(a.name()) == []
            assert driver.records.connected() == []  # this call's connect released again
            driver.attach_volume(info, b.name(), attach_mode="ro",
                                 writers_elsewhere=elsewhere)  # a reader: warned only
            driver.attach_volume(info, a.name(), writers_elsewhere=elsewhere,
                                 allow_shared_write=True)
            driver.detach_volume(a.name(), vid)
            driver.detach_volume(b.name(), vid)

        # attach --cinder asks Cinder itself: the RBD volume is opened by QEMU, so this host
        # cannot read it, and says the writer elsewhere shares it (before: nothing was said)
        with caplog.at_level(logging.WARNING, logger="virtdriver"):
            assert cli("--state-dir", str(state), "attach", c.name(), "--cinder", cinder.url,
                       "--volume", vid) == 0
        said = [r.getMessage() for r in caplog.records if "shared with a writer" in r.getMessage()]
        assert said and f"attachment {rw} on vd-other-node.test" in said[0], said
        assert cli("--state-dir", str(state), "detach", c.name(), vid) == 0
    finally:
        cleanup_volume(cinder, vid)
