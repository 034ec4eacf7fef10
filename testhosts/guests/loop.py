"""Raw volumes for guests: sparse files, and loop devices over them.

A loop device is what os-brick's LOCAL connector connects. Other work on the host may hold loop
devices too: exactly the devices bound to our own backing file are detached again, never all
(no ``losetup -D``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

_LOOP_DEVICE = re.compile(r"/dev/loop\d+")
#: ``FIRST-LAST``: take loop devices from these numbers instead of the lowest free one. Test
#: workers running side by side each get their own (tests/conftest.py): the kernel hands a freed
#: number out again at once, and a guest of one test may still name a device another then gets.
LOOP_RANGE_ENV = "VIRTDRIVER_LOOP_RANGE"


class LoopDeviceError(RuntimeError):
    """losetup did not do what was asked; the message says what it answered."""


def sparse_file(path: str | os.PathLike[str], size: int = 16 << 20) -> Path:
    """A sparse file of ``size`` bytes at ``path`` (a raw volume image), created or resized."""
    with open(path, "wb") as fh:
        fh.truncate(size)
    return Path(path)


def loop_devices_of(backing_file: str | os.PathLike[str]) -> list[str]:
    """The loop devices bound to ``backing_file`` now (``losetup -j``)."""
    listed = subprocess.run(["losetup", "-j", os.fspath(backing_file)], capture_output=True,
                            text=True).stdout
    found = {line.split(":", 1)[0] for line in listed.splitlines() if ":" in line}
    return sorted(d for d in found if _LOOP_DEVICE.fullmatch(d))


def _bind(backing: Path) -> str:
    """Bind a loop device to ``backing``: the lowest free one, or a free one of the range."""
    chosen = os.environ.get(LOOP_RANGE_ENV)
    if not chosen:
        return subprocess.run(["losetup", "--find", "--show", str(backing)], check=True,
                              capture_output=True, text=True).stdout.strip()
    first, _, last = chosen.partition("-")
    for number in range(int(first), int(last) + 1):
        if Path(f"/sys/block/loop{number}/loop").exists():
            continue  # bound already
        device = f"/dev/loop{number}"
        # losetup makes the device (through /dev/loop-control) when it does not exist yet
        if subprocess.run(["losetup", device, str(backing)], capture_output=True).returncode == 0:
            return device
    raise LoopDeviceError(f"no free loop device in {LOOP_RANGE_ENV}={chosen}")


class LoopDevice:
    """A loop device over a sparse file in a private temp dir (under ``directory`` if given).

    ``losetup --find --show FILE`` on enter (or a free number of ``VIRTDRIVER_LOOP_RANGE``); on
    exit the device is detached (``losetup -d DEV``) together with any other bound to our backing
    file (an interrupt can land between losetup binding one and us reading its name), and the
    temp dir is removed. ``device`` is e.g.
    ``/dev/loop3``; ``backing_file`` the sparse file.
    """

    def __init__(self, size: int = 64 * 1024 * 1024, *,
                 directory: str | os.PathLike[str] | None = None) -> None:
        self.size = size
        self._parent = directory
        self._tmpdir: str | None = None
        self.backing_file: Path | None = None
        self.device: str | None = None

    def __enter__(self) -> LoopDevice:
        self.attach()
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()

    def attach(self) -> str:
        if self.device is not None:
            raise LoopDeviceError(f"already attached as {self.device}")
        self._tmpdir = tempfile.mkdtemp(prefix="vdloop-", dir=self._parent)
        try:
            backing = sparse_file(Path(self._tmpdir, "backing.raw"), self.size)
            self.backing_file = backing
            out = _bind(backing)
            if not _LOOP_DEVICE.fullmatch(out):
                raise LoopDeviceError(f"unexpected losetup output: {out!r}")
        except BaseException:
            self.detach()
            raise
        self.device = out
        return out

    @property
    def sysfs_backing_file(self) -> str | None:
        """What the kernel says backs ``device`` now (None when not bound)."""
        if self.device is None:
            return None
        p = Path("/sys/block", Path(self.device).name, "loop", "backing_file")
        try:
            return p.read_text().strip()
        except OSError:
            return None

    def extend(self, new_size: int) -> None:
        """Grow the backing file and tell the kernel (``losetup -c``)."""
        if self.device is None or self.backing_file is None:
            raise LoopDeviceError("not attached")
        with open(self.backing_file, "r+b") as fh:
            fh.truncate(new_size)
        subprocess.run(["losetup", "-c", self.device], check=True, capture_output=True)
        self.size = new_size

    def detach(self) -> None:
        """Detach our device(s) and remove the temp dir; raises the first losetup failure."""
        dev, self.device = self.device, None
        ours = {dev} if dev is not None else set()
        problems = []
        try:
            if self.backing_file is not None and self.backing_file.exists():
                ours.update(loop_devices_of(self.backing_file))
            for each in sorted(ours):
                proc = subprocess.run(["losetup", "-d", each], capture_output=True, text=True)
                if proc.returncode != 0 and "No such device" not in proc.stderr:
                    problems.append(f"losetup -d {each} failed: {proc.stderr.strip()}")
        finally:
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
                self._tmpdir = None
        if problems:
            raise LoopDeviceError("; ".join(problems))
