"""The attach/detach/list/capabilities commands against the real libvirtd."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.volumes import file_volume

pytestmark = pytest.mark.hypervisor


def run(*args: str, state) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "virtdriver", "--connect", "qemu:///system",
                           "--state-dir", str(state), *args],
                          capture_output=True, text=True, check=False)


def test_attach_list_detach(guests, tmp_path) -> None:
    a = guests.start("cli")
    image = tmp_path / "v.raw"
    subprocess.run(["truncate", "-s", "8M", str(image)], check=True)
    info = file_volume(str(image), multiattach=True)
    vid = info["data"]["volume_id"]
    path = tmp_path / "v.json"
    path.write_text(json.dumps(info))
    state = tmp_path / "state"

    done = run("attach", a.name(), str(path), "--attach-mode", "ro", state=state)
    assert done.returncode == 0, done.stderr
    assert f"attached to {a.name()} as /dev/sda (ro, shareable)" in done.stdout

    listed = json.loads(run("list", a.name(), "--json", state=state).stdout)
    (entry,) = listed["volumeAttachments"]
    assert {k: entry[k] for k in ("device", "id", "serverId", "volumeId", "attach_mode")} == {
        "device": "/dev/sda", "id": vid, "serverId": a.UUIDString(), "volumeId": vid,
        "attach_mode": "ro"}
    table = run("list", a.name(), state=state).stdout
    assert "Device" in table and vid in table

    assert run("detach", a.name(), vid, state=state).returncode == 0
    again = run("detach", a.name(), vid, state=state)
    assert again.returncode == 1 and again.stderr.startswith("virtdriver: error: volume")
    assert len(again.stderr.splitlines()) == 1 and "Traceback" not in again.stderr


def test_errors_are_one_line(tmp_path) -> None:
    done = run("list", "no-such-guest", state=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "virtdriver: error: no guest named or with UUID 'no-such-guest' on qemu:///system"]


def test_capabilities_json(tmp_path) -> None:
    caps = json.loads(run("capabilities", "--json", state=tmp_path).stdout)
    assert caps["supports_multiattach"] is True and caps["supports_attach_mode"] is True


def test_attach_many_prints_progress_and_a_summary(guests, tmp_path) -> None:
    doms = [guests.start(f"m{i}") for i in range(3)]
    image = tmp_path / "m.raw"
    subprocess.run(["truncate", "-s", "8M", str(image)], check=True)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(file_volume(str(image), multiattach=False)))
    names = [d.name() for d in doms]

    refused = run("attach-many", str(path), *names, state=tmp_path / "state")
    assert refused.returncode == 3 and "not multiattach" in refused.stderr  # refused by policy

    done = run("attach-many", str(path), *names, "--multiattach", "--attach-mode", "ro",
               state=tmp_path / "state")
    assert done.returncode == 0, done.stderr
    assert sorted(line.split(" ")[1].rstrip(":") for line in done.stderr.splitlines()) == sorted(
        names)  # plain progress lines when stderr is not a terminal
    assert "3 guests attached, host side connected once" in done.stdout
    for name in names:
        assert name in done.stdout


def test_attach_many_says_rolled_back_for_guests_that_took_the_disk(guests, system_conn,
                                                                   tmp_path) -> None:
    from testhosts.guests import guest_xml, kvm_available

    doms = [guests.start(f"r{i}") for i in range(2)]
    # No SCSI controller: the disk goes on virtio, which QEMU cannot hot-plug into this guest.
    odd = system_conn.createXML(guest_xml(guests.unique_name("noscsi"), kvm=kvm_available())
                                .replace("<controller type='scsi' index='0' "
                                         "model='virtio-scsi'/>", ""), 0)
    try:
        image = tmp_path / "r.raw"
        subprocess.run(["truncate", "-s", "8M", str(image)], check=True)
        path = tmp_path / "r.json"
        path.write_text(json.dumps(file_volume(str(image), multiattach=True)))
        done = run("attach-many", str(path), doms[0].name(), odd.name(), doms[1].name(),
                   state=tmp_path / "state")
        assert done.returncode == 1, done.stderr
        said = dict(line.split(" ", 1)[1].split(": ", 1) for line in done.stderr.splitlines()
                    if not line.startswith("virtdriver:"))
        assert said == {doms[0].name(): "rolled back", odd.name(): "failed",
                        doms[1].name(): "rolled back"}, done.stderr
        assert done.stderr.splitlines()[-1].startswith("virtdriver: error: attaching volume")
    finally:
        odd.destroy()
