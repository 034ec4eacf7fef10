"""A multiattach volume through nova's REST API at microversion 2.60, on the small OpenStack of
scripts/test-openstack.sh (nova-compute on this host's libvirtd, Cinder's RBD driver on a test
Ceph).

Plain HTTP with keystone tokens (requests), libvirt-python for the guests' XML: runs with the
project's .venv (``scripts/test-openstack.sh up``, then ``.venv/bin/python -m pytest
tests/openstack``); it reads the cloud's URLs and credentials from ``scripts/test-openstack.sh
env`` itself. Skipped when that cloud is not up (failed with ``VD_OS_REQUIRED=1``, as
``scripts/test.sh --openstack`` runs it). The compute driver checked in
nova-compute's log is the one ``env`` names (virtdriver's, unless ``up`` was told otherwise).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest
import requests
from lxml import etree

from tests.support import ROOT, script_env

pytestmark = pytest.mark.hypervisor

SCRIPT = ROOT / "scripts" / "test-openstack.sh"
MICROVERSION = "2.60"  # the first with multiattach volumes
TIMEOUT = 300  # seconds for a server to boot, shelve or go away, a volume to settle
OLD_MICROVERSION = "Multiattach volumes are only supported starting with compute API version 2.60."


def wait(what: str, check: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
    end = time.monotonic() + timeout
    while True:
        result = check()
        if result is not None and result is not False:  # an lxml element has no truth
            return result
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(1)


class Api:
    """One keystone project's view of nova and Cinder."""

    def __init__(self, env: dict[str, str], who: str) -> None:
        body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": env[f"VD_OS_{who}_USERNAME"], "password": env[f"VD_OS_{who}_PASSWORD"],
            "domain": {"name": env["VD_OS_DOMAIN_NAME"]}}}},
            "scope": {"project": {"name": env[f"VD_OS_{who}_PROJECT_NAME"],
                                  "domain": {"name": env["VD_OS_DOMAIN_NAME"]}}}}}
        reply = requests.post(f"{env['OS_AUTH_URL']}/auth/tokens", json=body, timeout=30)
        reply.raise_for_status()
        self.token = reply.headers["X-Subject-Token"]
        self.project = reply.json()["token"]["project"]["id"]
        self.nova_url = env["VD_OS_NOVA_URL"]
        self.cinder_url = f"{env['VD_OS_CINDER_URL']}/{self.project}"

    def nova_reply(self, method: str, path: str, body: Any = None,
                   microversion: str = MICROVERSION) -> requests.Response:
        return requests.request(method, self.nova_url + path, json=body, timeout=60, headers={
            "X-Auth-Token": self.token, "OpenStack-API-Version": f"compute {microversion}"})

    def nova(self, method: str, path: str, body: Any = None, microversion: str = MICROVERSION,
             expect: tuple[int, ...] = (200, 202, 204)) -> Any:
        reply = self.nova_reply(method, path, body, microversion)
        assert reply.status_code in expect, f"{method} {path}: {reply.status_code} {reply.text}"
        return reply.json() if reply.content else None

    def nova_refuses(self, status: int, method: str, path: str, body: Any,
                     microversion: str) -> str:
        """The request is answered `status`; returns nova's explanation."""
        reply = self.nova_reply(method, path, body, microversion)
        assert reply.status_code == status, \
            f"{method} {path} at {microversion}: {reply.status_code} {reply.text}"
        fault = next(iter(reply.json().values()))
        return str(fault["message"])

    def cinder(self, method: str, path: str, body: Any = None,
               expect: tuple[int, ...] = (200, 202, 204)) -> Any:
        reply = requests.request(method, self.cinder_url + path, json=body, timeout=60, headers={
            "X-Auth-Token": self.token, "OpenStack-API-Version": "volume 3.44"})
        assert reply.status_code in expect, f"{method} {path}: {reply.status_code} {reply.text}"
        return reply.json() if reply.content else None

    def server_gone(self, sid: str) -> bool:
        return self.nova_reply("GET", f"/servers/{sid}").status_code == 404

    def server_status(self, sid: str, status: str) -> bool:
        server = self.nova("GET", f"/servers/{sid}")["server"]
        assert server["status"] != "ERROR", server.get("fault")
        return bool(server["status"] == status)

    def create_server(self, cloud: dict[str, str], name: str) -> str:
        return str(self.nova("POST", "/servers", {"server": {
            "name": name, "imageRef": cloud["VD_OS_IMAGE_ID"],
            "flavorRef": cloud["VD_OS_FLAVOR_ID"], "networks": "none"}})["server"]["id"])

    def create_volume(self, cloud: dict[str, str], name: str) -> str:
        volume = self.cinder("POST", "/volumes", {"volume": {
            "size": 1, "name": name, "volume_type": cloud["VD_OS_MULTIATTACH_VOLUME_TYPE"]}})
        return str(volume["volume"]["id"])

    def volume(self, vid: str) -> dict[str, Any]:
        return dict(self.cinder("GET", f"/volumes/{vid}")["volume"])

    def attached_servers(self, vid: str) -> list[str]:
        return sorted(a["server_id"] for a in self.volume(vid)["attachments"])

    def delete_servers(self, servers: list[str]) -> None:
        for sid in servers:
            self.nova("DELETE", f"/servers/{sid}", expect=(204, 404))
        for sid in servers:
            wait(f"server {sid} to be deleted", lambda sid=sid: self.server_gone(sid))

    def delete_volume(self, vid: str) -> None:
        wait("the volume to be deletable",
             lambda: self.volume(vid)["status"] in ("available", "error"))
        self.cinder("DELETE", f"/volumes/{vid}")


@pytest.fixture(scope="module")
def cloud() -> dict[str, str]:
    env = script_env(SCRIPT)
    if env.get("VD_OS_UP") != "1":
        reason = "the small OpenStack is not up (scripts/test-openstack.sh up)"
        if os.environ.get("VD_OS_REQUIRED"):  # scripts/test.sh --openstack brought it up
            pytest.fail(reason)
        pytest.skip(reason)
    return env


@pytest.fixture(scope="module")
def driver(cloud) -> str:
    """The compute driver nova-compute loaded last, which must be the one `env` names."""
    want = cloud["VD_OS_COMPUTE_DRIVER"]
    assert want, "scripts/test-openstack.sh env names no VD_OS_COMPUTE_DRIVER"
    log = (Path(cloud["VD_OS_LOG_DIR"]) / "nova-compute.log").read_text(errors="replace")
    loaded = [line for line in log.splitlines() if "Loading compute driver" in line]
    assert loaded and f"'{want}'" in loaded[-1], f"nova-compute did not load {want}: {loaded[-1:]}"
    return want


@pytest.fixture
def demo(cloud) -> Api:
    return Api(cloud, "DEMO")


@pytest.fixture
def conn() -> Iterator[libvirt.virConnect]:
    c = libvirt.open("qemu:///system")
    yield c
    c.close()


def volume_disk(conn: libvirt.virConnect, server_id: str, volume_id: str) -> etree._Element | None:
    """The guest's <disk> of the volume (nova's alias ua-<volume id>), from the live XML."""
    xml = conn.lookupByUUIDString(server_id).XMLDesc(0)
    for disk in etree.fromstring(xml).iterfind("./devices/disk"):
        alias = disk.find("alias")
        if alias is not None and alias.get("name") == f"ua-{volume_id}":
            return disk
    return None


def test_multiattach_volume_on_two_servers(cloud, driver, demo, conn) -> None:
    started = time.monotonic()
    tag = uuid.uuid4().hex[:8]
    servers: list[str] = []
    volume_id = ""
    try:
        volume_id = demo.create_volume(cloud, f"vd-smoke-{tag}")
        for name in ("a", "b"):
            servers.append(demo.create_server(cloud, f"vd-smoke-{tag}-{name}"))
        volume = wait("the volume", lambda: (v := demo.volume(volume_id))["status"] == "available"
                      and v)
        assert volume["multiattach"] is True
        # before 2.60 nova refuses to boot with a multiattach volume: 400, nothing created
        bdm = [{"boot_index": 0, "uuid": cloud["VD_OS_IMAGE_ID"], "source_type": "image",
                "destination_type": "local"},
               {"boot_index": -1, "uuid": volume_id, "source_type": "volume",
                "destination_type": "volume"}]
        message = demo.nova_refuses(400, "POST", "/servers", {"server": {
            "name": f"vd-smoke-{tag}-old", "imageRef": cloud["VD_OS_IMAGE_ID"],
            "flavorRef": cloud["VD_OS_FLAVOR_ID"], "networks": "none",
            "block_device_mapping_v2": bdm}}, microversion="2.59")
        assert message == OLD_MICROVERSION
        for sid in servers:
            wait(f"server {sid} to be ACTIVE", lambda sid=sid: demo.server_status(sid, "ACTIVE"))

        # before 2.60 nova refuses to attach it: 400, and Cinder has no attachment
        first, second = servers
        attach = {"volumeAttachment": {"volumeId": volume_id}}
        path = f"/servers/{first}/os-volume_attachments"
        assert demo.nova_refuses(400, "POST", path, attach, "2.59") == OLD_MICROVERSION
        assert demo.attached_servers(volume_id) == []

        # attach to both; each attachment reaches its guest as a shareable disk
        # (one at a time, as tempest does: Cinder reserves no volume while it is `reserved`)
        for n, sid in enumerate(servers, 1):
            attachment = demo.nova("POST", f"/servers/{sid}/os-volume_attachments", attach)
            assert attachment["volumeAttachment"]["volumeId"] == volume_id
            assert attachment["volumeAttachment"]["serverId"] == sid
            wait(f"attachment {n} in use", lambda sid=sid: demo.volume(volume_id)["status"]
                 == "in-use" and sid in demo.attached_servers(volume_id))
        wait("both attachments in Cinder",
             lambda: demo.attached_servers(volume_id) == sorted(servers))
        assert demo.volume(volume_id)["status"] == "in-use"
        for sid in servers:
            listed = demo.nova("GET", f"/servers/{sid}/os-volume_attachments")
            assert [(a["volumeId"], a["serverId"]) for a in listed["volumeAttachments"]] == \
                [(volume_id, sid)]
            disk = wait(f"the disk in {sid}'s XML",
                        lambda sid=sid: volume_disk(conn, sid, volume_id))
            text = etree.tostring(disk).decode()
            assert disk.find("shareable") is not None, text
            assert disk.find("driver").get("cache") == "none", text
            assert disk.find("readonly") is None, text
            assert disk.find("target").get("bus") == "scsi", text
            assert disk.find("source").get("protocol") == "rbd", text
            assert disk.find("source").get("name") == f"volumes/volume-{volume_id}", text
            assert disk.find("serial").text == volume_id, text

        # a second attachment to the same server is refused, at any microversion
        demo.nova_refuses(400, "POST", path, attach, MICROVERSION)

        # detach from the first; the second keeps its disk
        demo.nova("DELETE", f"/servers/{first}/os-volume_attachments/{volume_id}")
        wait("the disk to leave the first guest",
             lambda: volume_disk(conn, first, volume_id) is None)
        wait("one attachment left in Cinder", lambda: demo.attached_servers(volume_id) == [second])
        assert demo.volume(volume_id)["status"] == "in-use"
        kept = volume_disk(conn, second, volume_id)
        assert kept is not None and kept.find("shareable") is not None
        assert demo.nova("GET", path)["volumeAttachments"] == []
        assert [a["volumeId"] for a in demo.nova(
            "GET", f"/servers/{second}/os-volume_attachments")["volumeAttachments"]] == [volume_id]

        # and from the second
        demo.nova("DELETE", f"/servers/{second}/os-volume_attachments/{volume_id}")
        wait("the disk to leave the second guest",
             lambda: volume_disk(conn, second, volume_id) is None)
        wait("the volume to be available again",
             lambda: demo.volume(volume_id)["status"] == "available")
        assert demo.attached_servers(volume_id) == []
    finally:
        demo.delete_servers(servers)
        if volume_id:
            demo.delete_volume(volume_id)
    for sid in servers:  # nova removed its guests
        with pytest.raises(libvirt.libvirtError):
            conn.lookupByUUIDString(sid)
    print(f"two servers, one multiattach volume, attach/detach/delete: "
          f"{time.monotonic() - started:.1f} s")


def test_multiattach_volume_to_shelved_offloaded_server(cloud, driver, demo, conn) -> None:
    """nova's API reference: attaching to a shelved-offloaded server needs 2.20 (409 before);
    a multiattach volume cannot be attached to one at all (400)."""
    tag = uuid.uuid4().hex[:8]
    servers: list[str] = []
    volume_id = ""
    try:
        volume_id = demo.create_volume(cloud, f"vd-shelved-{tag}")
        servers.append(demo.create_server(cloud, f"vd-shelved-{tag}"))
        sid = servers[0]
        wait(f"server {sid} to be ACTIVE", lambda: demo.server_status(sid, "ACTIVE"))
        demo.nova("POST", f"/servers/{sid}/action", {"shelve": None})
        wait(f"server {sid} to be SHELVED_OFFLOADED",
             lambda: demo.server_status(sid, "SHELVED_OFFLOADED"))
        with pytest.raises(libvirt.libvirtError):  # offloaded: no guest on the host
            conn.lookupByUUIDString(sid)
        wait("the volume", lambda: demo.volume(volume_id)["status"] == "available")
        attach = {"volumeAttachment": {"volumeId": volume_id}}
        path = f"/servers/{sid}/os-volume_attachments"
        message = demo.nova_refuses(409, "POST", path, attach, "2.19")
        assert message == (f"Cannot 'attach_volume' instance {sid} while it is in "
                           "vm_state shelved_offloaded"), message
        message = demo.nova_refuses(400, "POST", path, attach, MICROVERSION)
        assert message == ("Attaching multiattach volumes is not supported for "
                           "shelved-offloaded instances."), message
        assert demo.nova("GET", path)["volumeAttachments"] == []
        assert demo.attached_servers(volume_id) == []
    finally:
        demo.delete_servers(servers)
        if volume_id:
            demo.delete_volume(volume_id)


def test_several_servers_booted_with_one_multiattach_volume_are_refused(cloud, driver,
                                                                         demo) -> None:
    """nova 34 refuses a volume in the block device mappings of a multi-server boot
    (``min_count`` > 1) whatever the volume is, multiattach too (400, nothing made):
    ``API._check_and_transform_bdm``. Servers booted one by one share it (the test above)."""
    tag = uuid.uuid4().hex[:8]
    volume_id = ""
    try:
        volume_id = demo.create_volume(cloud, f"vd-many-{tag}")
        wait("the volume", lambda: demo.volume(volume_id)["status"] == "available")
        bdm = [{"boot_index": 0, "uuid": cloud["VD_OS_IMAGE_ID"], "source_type": "image",
                "destination_type": "local"},
               {"boot_index": -1, "uuid": volume_id, "source_type": "volume",
                "destination_type": "volume"}]
        name = f"vd-many-{tag}"
        message = demo.nova_refuses(400, "POST", "/servers", {"server": {
            "name": name, "imageRef": cloud["VD_OS_IMAGE_ID"],
            "flavorRef": cloud["VD_OS_FLAVOR_ID"], "networks": "none", "min_count": 2,
            "block_device_mapping_v2": bdm}}, MICROVERSION)
        assert message == "Cannot attach one or more volumes to multiple instances", message
        listed = demo.nova("GET", f"/servers?name={name}")["servers"]
        assert listed == [] and demo.attached_servers(volume_id) == []
        assert demo.volume(volume_id)["status"] == "available"
    finally:
        if volume_id:
            demo.delete_volume(volume_id)


def test_a_read_only_volume_reaches_the_guest_read_only(cloud, driver, demo, conn) -> None:
    """A multiattach volume Cinder holds read-only (its readonly flag) is attached through
    nova: Cinder's attachment is ``ro``, its connection_info says ``access_mode: ro``, and the
    guest's disk is ``<readonly/>`` and ``<shareable/>``."""
    tag = uuid.uuid4().hex[:8]
    servers: list[str] = []
    volume_id = ""
    try:
        volume_id = demo.create_volume(cloud, f"vd-ro-{tag}")
        servers.append(demo.create_server(cloud, f"vd-ro-{tag}"))
        sid = servers[0]
        wait("the volume", lambda: demo.volume(volume_id)["status"] == "available")
        demo.cinder("POST", f"/volumes/{volume_id}/action",
                    {"os-update_readonly_flag": {"readonly": True}})
        wait(f"server {sid} to be ACTIVE", lambda: demo.server_status(sid, "ACTIVE"))
        demo.nova("POST", f"/servers/{sid}/os-volume_attachments",
                  {"volumeAttachment": {"volumeId": volume_id}})
        wait("the attachment in use", lambda: demo.volume(volume_id)["status"] == "in-use")
        attachment_id = demo.volume(volume_id)["attachments"][0]["attachment_id"]
        attachment = demo.cinder("GET", f"/attachments/{attachment_id}")["attachment"]
        assert attachment["attach_mode"] == "ro", attachment
        disk = wait("the disk in the guest's XML", lambda: volume_disk(conn, sid, volume_id))
        text = etree.tostring(disk).decode()
        assert disk.find("readonly") is not None, text
        assert disk.find("shareable") is not None, text
        demo.nova("DELETE", f"/servers/{sid}/os-volume_attachments/{volume_id}")
        wait("the disk to leave the guest", lambda: volume_disk(conn, sid, volume_id) is None)
        wait("the volume to be available again",
             lambda: demo.volume(volume_id)["status"] == "available")
    finally:
        demo.delete_servers(servers)
        if volume_id:
            demo.delete_volume(volume_id)
