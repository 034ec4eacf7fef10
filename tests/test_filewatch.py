"""DirWatch: the names changed in watched directories, or None when that cannot be told; and
LazyWatch, which its owner starts, and which is made again when its directories come back."""

from __future__ import annotations

import os
from pathlib import Path

from virtdriver.hypervisor.filewatch import DirWatch, LazyWatch


def save_as_libvirt_does(path: Path, text: str) -> None:
    new = path.with_name(path.name + ".new")
    new.write_text(text)
    os.replace(new, path)


def test_nothing_changed_is_an_empty_answer(tmp_path: Path) -> None:
    watch = DirWatch([tmp_path])
    assert watch.changes() == {}
    assert watch.changes() == {}


def test_a_rename_over_a_file_names_it(tmp_path: Path) -> None:
    (tmp_path / "a.xml").write_text("old")
    watch = DirWatch([tmp_path])
    save_as_libvirt_does(tmp_path / "a.xml", "new")
    assert watch.changes() == {str(tmp_path): {"a.xml": False, "a.xml.new": True}}
    assert watch.changes() == {}


def test_each_directory_answers_for_its_own_files(tmp_path: Path) -> None:
    run, etc = tmp_path / "run", tmp_path / "etc"
    run.mkdir()
    etc.mkdir()
    watch = DirWatch([run, etc])
    save_as_libvirt_does(etc / "g.xml", "defined")
    (run / "h.xml").unlink(missing_ok=True)
    (run / "h.xml").write_text("running")
    assert watch.changes() == {str(etc): {"g.xml": False, "g.xml.new": True},
                               str(run): {"h.xml": False}}


def test_a_removed_file_is_named_as_removed(tmp_path: Path) -> None:
    (tmp_path / "gone.xml").write_text("x")
    (tmp_path / "back.xml").write_text("x")
    watch = DirWatch([tmp_path])
    (tmp_path / "gone.xml").unlink()
    (tmp_path / "back.xml").unlink()
    save_as_libvirt_does(tmp_path / "back.xml", "again")  # removed meanwhile, then back
    assert watch.changes() == {str(tmp_path): {"gone.xml": True, "back.xml": True,
                                               "back.xml.new": True}}


def test_an_overflowed_queue_cannot_tell_and_then_starts_again(tmp_path: Path) -> None:
    watch = DirWatch([tmp_path])
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    for n in range(limit // 2 + 10):  # two events each: created, closed after writing
        (tmp_path / f"f{n}").write_text("")
    assert watch.changes() is None
    save_as_libvirt_does(tmp_path / "after.xml", "x")
    assert watch.changes() == {str(tmp_path): {"after.xml": False, "after.xml.new": True}}


def test_a_removed_directory_cannot_tell_from_then_on(tmp_path: Path) -> None:
    watched = tmp_path / "d"
    watched.mkdir()
    watch = DirWatch([watched])
    watched.rmdir()
    assert watch.changes() is None
    assert watch.changes() is None


def test_a_lazy_watch_runs_once_started_and_again_once_its_directory_is_back(
        tmp_path: Path) -> None:
    import shutil
    import subprocess
    import sys

    watched = tmp_path / "d"
    watch = LazyWatch([watched])
    assert not watch.running and watch.changes() is None  # not started: cannot tell
    assert not watch.start() and watch.changes() is None  # no directory yet
    watched.mkdir()
    assert watch.changes() is None and watch.running  # made now: what came before is unknown
    save_as_libvirt_does(watched / "a.xml", "x")
    assert watch.changes() == {str(watched): {"a.xml": False, "a.xml.new": True}}
    shutil.rmtree(watched)  # removed (a run directory can be, with its daemon)
    assert watch.changes() is None and not watch.running
    assert watch.changes() is None and not watch.running  # still gone
    watched.mkdir()  # ... and made again
    assert watch.changes() is None and watch.running
    save_as_libvirt_does(watched / "b.xml", "y")
    assert watch.changes() == {str(watched): {"b.xml": False, "b.xml.new": True}}
    watch.close()
    assert not watch.running
    # ctypes is imported when a watch starts, not with the module (a one-shot command)
    code = ("import sys, virtdriver.hypervisor.filewatch as f; w = f.LazyWatch(['/tmp']); "
            "assert 'ctypes' not in sys.modules; w.start(); assert 'ctypes' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_forked_child_opens_its_own_queue_and_leaves_the_parents(tmp_path: Path) -> None:
    watch = DirWatch([tmp_path])
    save_as_libvirt_does(tmp_path / "before.xml", "x")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first answer is "cannot tell", then its own changes
        os.close(read)
        first = watch.changes()
        (tmp_path / "child.xml").write_text("x")
        second = watch.changes()
        ok = first is None and second == {str(tmp_path): {"child.xml": False}}
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
    assert watch.changes() == {str(tmp_path): {"before.xml": False, "before.xml.new": True,
                                             "child.xml": False}}


def test_a_look_an_interrupt_ended_halfway_cannot_tell(tmp_path: Path, monkeypatch) -> None:
    import pytest

    from virtdriver.hypervisor import filewatch

    watch = DirWatch([tmp_path])
    save_as_libvirt_does(tmp_path / "a.xml", "x")
    real = os.read

    def interrupted(fd: int, size: int) -> bytes:
        real(fd, size)  # the events are taken from the queue, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(filewatch.os, "read", interrupted)
    with pytest.raises(KeyboardInterrupt):
        watch.changes()
    monkeypatch.setattr(filewatch.os, "read", real)
    assert watch.changes() is None  # what was taken is lost: read everything again
    save_as_libvirt_does(tmp_path / "b.xml", "x")
    assert watch.changes() == {str(tmp_path): {"b.xml": False, "b.xml.new": True}}
