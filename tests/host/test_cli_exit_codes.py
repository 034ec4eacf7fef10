"""Every command follows the README's exit-code table: the same bad input, the same code, one line.

Each command that reads a CONNECTION_INFO gets the same unusable documents (exit 2, InputError);
every command gets an unknown guest (exit 1, HostError) and bad option values (exit 2). Run as an
operator runs it: ``python -m virtdriver`` in a child process, against the real libvirtd.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testhosts.guests import LoopDevice
from tests.support.volumes import local_volume
from virtdriver.hypervisor.locks import guest_lock

pytestmark = pytest.mark.hypervisor

MIB = 1 << 20
MISSING = "vdtest-no-such-guest-5e1f"
PROGRESS = re.compile(r"[0-9]+/[0-9]+ \S+: ")


def run(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "virtdriver", "--connect", "qemu:///system",
                           "--state-dir", str(state), *args],
                          capture_output=True, text=True, check=False, timeout=300)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line (after attach-many's progress, a line per guest: ``1/2 NAME: ...``)."""
    lines = [line for line in result.stderr.splitlines() if not PROGRESS.match(line)]
    assert len(lines) == 1 and lines[0].startswith("virtdriver: error: "), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    return lines[0]


def bad_documents(device: str) -> dict[str, dict]:
    """Documents every command must refuse as bad input, keyed by what is wrong."""
    good = local_volume(device, multiattach=False)
    vid = good["data"]["volume_id"]

    def with_data(**data: object) -> dict:
        return {**good, "data": {**good["data"], **data}}

    return {
        "access_mode": with_data(access_mode="rx"),
        "record attach_mode": {"attachment": {"attach_mode": "wr", "connection_info": {
            "driver_volume_type": "local", "volume_id": vid, "device_path": device}}},
        "relative path": with_data(device_path="dev/loop0"),
        "newline in path": with_data(device_path=device + "\n"),
        "qos": with_data(qos_specs={"total_bytes_sec": "fast"}),
        "discard": with_data(discard="sometimes"),
        "rbd without name": {"driver_volume_type": "rbd", "serial": vid,
                             "data": {"volume_id": vid, "hosts": ["127.0.0.1"],
                                      "ports": ["6789"], "auth_enabled": False}},
    }


def test_every_command_answers_bad_input_with_exit_2_in_one_line(guests, tmp_path) -> None:
    dom = guests.start("codes")
    state = tmp_path / "state"
    with LoopDevice(16 * MIB) as dev, LoopDevice(16 * MIB) as other:
        attached = local_volume(other.device, multiattach=False)
        attached_file = tmp_path / "attached.json"
        attached_file.write_text(json.dumps(attached))
        assert run(state, "attach", dom.name(), str(attached_file)).returncode == 0
        for what, document in bad_documents(dev.device).items():
            path = tmp_path / "bad.json"
            path.write_text(json.dumps(document))
            commands = {
                "render": ["render", str(path)],
                "attach": ["attach", dom.name(), str(path)],
                "attach-many": ["attach-many", str(path), dom.name()],
                "swap": ["swap", dom.name(), str(attached_file), str(path)],
                "extend": ["extend", str(path)],
                "migrate-prepare": ["migrate-prepare", str(path), dom.UUIDString()],
            }
            for command, argv in commands.items():
                result = run(state, *argv)
                assert result.returncode == 2, (what, command, result.stderr)
                one_line(result)
        # Nothing was left connected by any of them, and the guest keeps its one volume.
        listed = json.loads(run(state, "list", dom.name(), "--json").stdout)
        assert [a["volumeId"] for a in listed["volumeAttachments"]] == [
            attached["data"]["volume_id"]]


@pytest.mark.parametrize("argv", [
    ["attach", MISSING, "VOLUME"],
    ["detach", MISSING, "7d2c9a10-3b1e-4f55-9c2d-0e1f2a3b4c5d"],
    ["list", MISSING],
    ["swap", MISSING, "VOLUME", "VOLUME"],
    ["extend", "VOLUME", MISSING],
    ["repair-labels", MISSING],
    ["migrate", MISSING, "--to", "qemu:///system", "--dest-state-dir", "/tmp/vd-none"],
])
def test_an_unknown_guest_is_exit_1_in_one_line(tmp_path, loop_device, argv) -> None:
    volume = tmp_path / "volume.json"
    info = local_volume(loop_device.device, multiattach=False)
    volume.write_text(json.dumps(info))
    result = run(tmp_path / "state", *[str(volume) if a == "VOLUME" else a for a in argv])
    line = one_line(result)
    assert result.returncode == 1 and MISSING in line, line


@pytest.mark.parametrize("argv", [
    ["connector", "--attach-mode", ""],
    ["connector", "--my-ip", "not an address"],
    ["connector", "--my-ip", "10.0.0.1\n"],
    ["render", "VOLUME", "--attach-mode", ""],
    ["attach", "g", "VOLUME", "--attach-mode", "rx"],
    ["detach", "g", "not a volume id!"],
    ["release", "not a volume id!"],
    ["swap", "g", "VOLUME", "VOLUME", "--timeout", "0"],
    ["extend", "VOLUME", "--size", "0"],
    ["list"],
    ["audit", "--json", "extra"],
])
def test_bad_options_are_exit_2_in_one_line(tmp_path, loop_device, argv) -> None:
    volume = tmp_path / "volume.json"
    volume.write_text(json.dumps(local_volume(loop_device.device, multiattach=False)))
    result = run(tmp_path / "state", *[str(volume) if a == "VOLUME" else a for a in argv])
    assert result.returncode == 2, result.stderr
    one_line(result)


def test_repair_labels_of_a_guest_that_does_not_exist_is_refused(guests, tmp_path) -> None:
    dom = guests.start("known")
    for argv in ([MISSING], [dom.name(), MISSING]):
        result = run(tmp_path / "state", "repair-labels", *argv)
        assert result.returncode == 1 and MISSING in one_line(result)
    result = run(tmp_path / "state", "repair-labels", dom.name())
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{dom.name()}: its definition names no security driver this host " \
                            "lacks\n"


def test_repair_labels_waits_for_the_guest_lock_an_attach_holds(guests, tmp_path, loop_device,
                                                                system_conn) -> None:
    """repair-labels rewrites a whole definition: it takes the guest's lock, as attach does, so
    an attach between its read and its write cannot be lost."""
    import libvirt

    from virtdriver.hypervisor.connection import security_models

    models = security_models(system_conn.getCapabilities())
    foreign = next(m for m in ("selinux", "apparmor") if m not in models)
    dom = guests.start("repair")
    planted = (f"<disk type='block' device='disk'><driver name='qemu' type='raw' cache='none'/>"
               f"<source dev='{loop_device.device}'><seclabel model='{foreign}' relabel='no'/>"
               f"</source><target dev='sdb' bus='scsi'/></disk>")
    dom.attachDeviceFlags(planted, libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    state = tmp_path / "state"
    with guest_lock(state / "locks", dom.UUIDString()):
        held = run(state, "repair-labels", dom.name(), "--lock-timeout", "1")
    assert held.returncode == 4, held.stderr  # OperationTimeout: it waited, changed nothing
    assert f"model='{foreign}'" in dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    done = run(state, "repair-labels", dom.name())
    assert done.returncode == 0 and f"removed the <seclabel model='{foreign}'>" in done.stdout
    assert f"model='{foreign}'" not in dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)


def test_an_output_that_cannot_be_written_is_one_line_from_every_command(guests,
                                                                         tmp_path) -> None:
    """A full disk (``/dev/full``) or a closed pipe: one line on stderr, never a traceback."""
    dom = guests.start("full")
    state = tmp_path / "state"
    with LoopDevice(16 * MIB) as old_dev, LoopDevice(16 * MIB) as new_dev:
        old, new = tmp_path / "old.json", tmp_path / "new.json"
        old.write_text(json.dumps(local_volume(old_dev.device, multiattach=False)))
        new.write_text(json.dumps(local_volume(new_dev.device, multiattach=False)))
        assert run(state, "attach", dom.name(), str(old)).returncode == 0
        base = [sys.executable, "-m", "virtdriver", "--connect", "qemu:///system",
                "--state-dir", str(state)]
        for argv in (["extend", str(old)], ["extend", str(old), "--json"],
                     ["swap", dom.name(), str(old), str(new)],
                     ["swap", dom.name(), str(new), str(old), "--json"],
                     ["list", dom.name()], ["audit"], ["connector"]):
            with open("/dev/full", "w") as full:
                result = subprocess.run(base + argv, stdout=full, stderr=subprocess.PIPE,
                                        text=True, check=False, timeout=300)
            assert "Traceback" not in result.stderr and "Exception" not in result.stderr, (
                argv, result.stderr)
            assert result.stderr.splitlines()[-1:] == [
                "virtdriver: error: cannot write to standard output: No space left on device"
            ], (argv, result.stderr)
            assert len(result.stderr.splitlines()) == 1, (argv, result.stderr)
