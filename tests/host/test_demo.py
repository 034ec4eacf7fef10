"""The demo runs end to end on real guests, tells its story, and leaves nothing behind.

It runs in a subprocess: the embedded driver it uses takes over every qemu:/// URI of its process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.linuxguest import linux_image  # noqa: F401 - fixture, found by name

pytestmark = pytest.mark.hypervisor
DEMO = [sys.executable, "-m", "testhosts.demo"]


def workspaces() -> set[Path]:
    return set(Path("/tmp").glob("vddemo-*"))


def loop_devices_over(dirs: set[Path]) -> list[str]:
    listed = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    return [line for line in listed.splitlines() if any(str(d) in line for d in dirs)]


def qemus_under(dirs: set[Path]) -> list[int]:
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if any(str(d) in cmdline for d in dirs):
            found.append(int(proc.name))
    return found


def test_demo_tells_the_story_and_cleans_up() -> None:
    before = workspaces()
    done = subprocess.run(DEMO, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)  # the timeout only guards against a hang
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert done.stderr == ""
    for line in (
        "virtdriver demo: one multiattach volume shared by two running guests",
        "1. Start two guests with no OS",
        "-> attached read-write to guest-a",
        "-> attached read-only to guest-b",
        "-> wrote 4096/4096 bytes at offset 0",
        "reads the same bytes back: pattern 0x5a verified",
        "-> refused by QEMU: Block node is read-only",
        "under another name; refusing to share it",
        "-> host connection kept: guest-b",
        "still reads 0x5a",
        "-> host connection released",
        "Cleaned up guests, loop device and temporary files.",
    ):
        assert line in out, line
    table = [ln.split() for ln in out.splitlines() if ln.strip().startswith("guest-")]
    assert [row[2:5] for row in table] == [["rw", "yes", "none"], ["ro", "yes", "none"]]
    assert workspaces() == before


def test_an_interrupted_demo_still_cleans_up() -> None:
    before = workspaces()
    proc = subprocess.Popen(DEMO, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # interrupt once the guests run and the volume is attached
            if "attached read-only" in line:
                break
        mine = workspaces() - before
        assert mine, "the demo made no workspace"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert "demo: interrupted" in err
    assert not (workspaces() - before)
    assert loop_devices_over(mine) == []
    assert qemus_under(mine) == []


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_interrupt_swallowed_by_a_callback_still_stops_the_story(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Python drops an exception raised in a weakref or __del__ callback; the signal is not
    lost."""
    import gc
    import weakref

    from testhosts.demo import story as demo

    monkeypatch.setattr(demo, "_signals_seen", [])

    class Doomed:
        pass

    obj = Doomed()
    ref = weakref.ref(obj, lambda _ref: demo._interrupted(signal.SIGINT, None))
    del obj
    gc.collect()  # the handler runs inside the callback and its KeyboardInterrupt is ignored
    assert ref() is None
    assert demo._signals_seen == [signal.SIGINT]
    story = demo.Story()
    with pytest.raises(KeyboardInterrupt):
        story.next("the step after the interrupt")
    assert "the step after" not in capsys.readouterr().out


def test_the_guest_view_shows_each_guest_s_own_kernel(linux_image) -> None:
    """``--guest-view``: the story on two Linux test guests, with lines from inside them (the
    image is built by the fixture, as the demo would on first use)."""
    before = workspaces()
    done = subprocess.run([*DEMO, "--guest-view"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False)  # the timeout only guards against a hang
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert done.stderr == ""
    inside = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("[inside ")]
    said = [ln.split("]", 1)[1].strip() for ln in inside if "] $ " not in ln]
    assert said[:2] == [said[0]] * 2 and said[0].startswith("Linux ")  # uname, both guests
    assert said[2].endswith("read-only 0, 33554432 bytes")  # A's kernel: writable
    assert said[3].endswith("read-only 1, 33554432 bytes")  # B's kernel: read-only
    assert said[4] == " ".join(["5a"] * 16)  # B reads A's pattern with O_DIRECT
    assert said[5].endswith("Read-only file system (exit 1)")  # B's own write, refused
    assert said[6].startswith("disks:") and "sd" not in said[6]  # gone from A after detach
    assert "Cleaned up guests, loop device and temporary files." in out
    assert workspaces() == before
