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
from virtdriver.errors import CinderError, PolicyRefusal
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
