"""A damaged state directory, table-driven: one line, a non-zero exit of the right kind, and
nothing changed -- not the state directory's bytes, not the guest, no host connection made.

Each row damages a fresh state directory in one way (missing pieces, wrong types, a read-only
mount, corrupted or unexpected records, a lock path that is a directory) and runs the CLI
commands that touch it against a real running guest. Damage the driver can safely live with (a
stale lock of a dead process, an unrelated damaged record) must not stop the operation at all.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from testhosts.guests import Guests, LoopDevice, open_connection
from tests.support.volumes import local_volume
from virtdriver.cli import main
from virtdriver.hypervisor.locks import file_token

pytestmark = pytest.mark.hypervisor
VID = "4be1f1d6-8f36-4a55-9a53-3d8f1c2a7b10"


def record_path(state: Path) -> Path:
    return state / "connections" / f"{file_token(VID)}.json"


def write_record(text: str | bytes) -> Callable[[Path], None]:
    def damage(state: Path) -> None:
        path = record_path(state)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return damage


def a_file(state: Path) -> None:
    state.write_text("not a directory\n")


def a_symlink_loop(state: Path) -> None:
    state.symlink_to(state)


def locks_a_file(state: Path) -> None:
    state.mkdir()
    (state / "locks").write_text("not a directory\n")


def lock_a_directory(state: Path) -> None:
    (state / "locks" / f"volume-{file_token(VID)}.lock").mkdir(parents=True)


def connections_a_file(state: Path) -> None:
    state.mkdir()
    (state / "connections").write_text("not a directory\n")


def read_only(state: Path) -> None:
    state.mkdir()
    subprocess.run(["mount", "--bind", str(state), str(state)], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(state)], check=True)


DAMAGES: dict[str, Callable[[Path], None]] = {
    "state dir is a file": a_file,
    "state dir is a symlink loop": a_symlink_loop,
    "state dir is read-only": read_only,
    "locks dir is a file": locks_a_file,
    "volume lock is a directory": lock_a_directory,
    "connections dir is a file": connections_a_file,
    "record is truncated": write_record('{"protocol": "LOCAL", "prop'),
    "record is binary": write_record(b"\xff\xfe\x00garbage\x80"),
    "record is a list": write_record("[1, 2, 3]"),
    "record has wrong types": write_record(json.dumps({"volume_id": VID, "properties": "x"})),
    "record has unknown fields": write_record(json.dumps({"volume_id": VID, "future": 1})),
    "record has a bad arrival": write_record(json.dumps({"volume_id": VID,
                                                        "arriving": [{"guest": 1}]})),
    "record is empty": write_record(""),
}
# The commands each damage is tried with, and the exit they must give (1: the host's state).
COMMANDS = {"attach": 1, "release": 1}


def snapshot(path: Path) -> dict[str, Any]:
    """Everything under ``path`` (not following links): kind and content of each entry."""
    found: dict[str, Any] = {}

    def visit(p: Path, rel: str) -> None:
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            found[rel] = None
            return
        if os.path.islink(p):
            found[rel] = ("link", os.readlink(p))
        elif p.is_dir():
            found[rel] = ("dir",)
            for child in sorted(os.listdir(p)):
                visit(p / child, f"{rel}/{child}")
        else:
            found[rel] = ("file", p.read_bytes(), st.st_mode)
    visit(path, ".")
    return found


def unchanged(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Equal, but for lock files (and their folder) that the call created: every operation
    leaves those behind by design (a lock is an open file, not the file's existence)."""
    def scratch(rel: str) -> bool:
        return before.get(rel) is None and (rel.endswith(".lock") or rel == "./locks")
    return {k: v for k, v in after.items() if not scratch(k)} == {
        k: v for k, v in before.items() if v is not None or not scratch(k)}


@pytest.fixture(scope="module")
def guest() -> Iterator[tuple[libvirt.virDomain, str]]:
    conn = open_connection("qemu:///system")
    with Guests(conn) as made, LoopDevice(16 << 20) as loop:
        yield made.start("damage"), str(loop.device)
    conn.close()


def run(*argv: str, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture | None = None) -> tuple[int, str, str]:
    """The CLI in this process; what it logs at ERROR (the CLI's stderr shows it) joins stderr."""
    if caplog is not None:
        caplog.clear()
    code = main(list(argv))
    out, err = capsys.readouterr()
    if caplog is not None:
        err += "".join(f"virtdriver: {r.getMessage()}\n" for r in caplog.records
                       if r.levelno >= logging.ERROR)
    return code, out, err


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("command", COMMANDS)
def test_damage_is_one_line_a_non_zero_exit_and_changes_nothing(
        damage: str, command: str, guest, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    dom, device = guest
    state = tmp_path / "state"
    DAMAGES[damage](state)
    info = tmp_path / "volume.json"
    info.write_text(json.dumps(local_volume(device, multiattach=False, volume_id=VID)))
    before, xml_before = snapshot(state), (dom.XMLDesc(0), dom.XMLDesc(2))
    try:
        argv = {"attach": ["attach", dom.name(), str(info)], "release": ["release", VID]}
        code, out, err = run("--state-dir", str(state), *argv[command], capsys=capsys,
                             caplog=caplog)
        assert code == COMMANDS[command], (code, out, err)
        assert out == "" and len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert err.startswith("virtdriver: error: ")
        assert unchanged(before, snapshot(state))
        assert (dom.XMLDesc(0), dom.XMLDesc(2)) == xml_before
    finally:
        if damage == "state dir is read-only":
            subprocess.run(["umount", str(state)], check=False)


def test_audit_names_a_damaged_record_and_other_volumes_still_attach(
        guest, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dom, device = guest
    state = tmp_path / "state"
    write_record("{not json")(state)
    code, out, err = run("--state-dir", str(state), "audit", capsys=capsys)
    assert code == 1 and "Traceback" not in out + err
    assert str(record_path(state)) in out
    other = tmp_path / "other.json"
    other.write_text(json.dumps(local_volume(device, multiattach=False)))
    code, out, err = run("--state-dir", str(state), "attach", dom.name(), str(other),
                         capsys=capsys)
    assert code == 0, err
    vid = json.loads(other.read_text())["serial"]
    assert run("--state-dir", str(state), "detach", dom.name(), vid, capsys=capsys)[0] == 0


def test_a_stale_lock_of_a_dead_process_does_not_block(guest, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    dom, device = guest
    state = tmp_path / "state"
    lock = state / "locks" / f"volume-{file_token(VID)}.lock"
    lock.parent.mkdir(parents=True)
    # a peer that held the lock, killed with its command: flock itself holds it (-o: the
    # command does not inherit it), so the lock goes with the peer, not 60 s later with sleep
    holder = subprocess.Popen(["flock", "-o", str(lock), "sh", "-c", "echo held; exec sleep 60"],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    os.killpg(holder.pid, 9)
    holder.wait()
    holder.stdout.close()
    info = tmp_path / "volume.json"
    info.write_text(json.dumps(local_volume(device, multiattach=False, volume_id=VID)))
    assert run("--state-dir", str(state), "attach", dom.name(), str(info), capsys=capsys)[0] == 0
    assert run("--state-dir", str(state), "detach", dom.name(), VID, capsys=capsys)[0] == 0


def test_a_detach_whose_record_is_damaged_gives_one_next_step(
        guest, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    """The disk is removed (the detach succeeds); what could not be released is said once, with
    the one step that helps -- not 'release', which cannot know what to release either."""
    dom, device = guest
    state = tmp_path / "state"
    info = tmp_path / "volume.json"
    info.write_text(json.dumps(local_volume(device, multiattach=False, volume_id=VID)))
    assert run("--state-dir", str(state), "attach", dom.name(), str(info), capsys=capsys)[0] == 0
    record_path(state).write_text("{not json")
    code, out, err = run("--state-dir", str(state), "detach", dom.name(), VID, capsys=capsys,
                         caplog=caplog)
    assert code == 0 and out.startswith(f"Volume {VID} detached"), (out, err)
    assert VID not in dom.XMLDesc(0)
    (line,) = err.splitlines()
    assert line.startswith(f"virtdriver: volume {VID} was detached from {dom.name()}, but its "
                           f"host connection was not released: the host-connection record "
                           f"{record_path(state)} is unreadable or damaged")
    assert line.endswith("so virtdriver cannot tell what to release: inspect the file, "
                         "disconnect the volume's host device by hand if it is still connected, "
                         "then remove the file")
    assert "virtdriver release" not in line and line.count("virtdriver audit") <= 1
    # release, asked anyway, gives the same step instead of guessing
    code, out, err = run("--state-dir", str(state), "release", VID, capsys=capsys)
    assert code == 1 and len(err.splitlines()) == 1 and "then remove the file" in err
