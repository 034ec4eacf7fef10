"""Label readers and checks shared by the SELinux tests of the nested host (not a test module)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.lsm.conftest import AuditWindow, run, split_context
from testhosts.guests import sparse_file

SHARED = "system_u:object_r:svirt_image_t:s0"
READONLY = "system_u:object_r:virt_content_t:s0"


def process_label(pid: int) -> str:
    """The SELinux context of ``pid`` as ``ps -eZ`` shows it."""
    for line in run("ps", "-eZ").splitlines()[1:]:  # LABEL PID TTY TIME CMD
        fields = line.split()
        if len(fields) >= 2 and fields[1] == str(pid):
            return fields[0]
    raise AssertionError(f"pid {pid} not in ps -eZ")


def device_label_in_namespace(pid: int, device: str) -> str:
    """The context of ``device`` inside QEMU ``pid``'s mount namespace (its private /dev)."""
    out = run("nsenter", "-t", str(pid), "-m", "--", "ls", "-Z", device).split()
    assert out and out[-1] == device, out
    return out[0]


def file_label(path: str) -> str:
    """The context of a host file as ``ls -Z`` shows it."""
    out = run("ls", "-Z", path).split()
    assert out and out[-1] == path, out
    return out[0]


def level_of(context: str) -> str:
    return split_context(context)[3]


def no_guest_denials(window: AuditWindow) -> None:
    """No enforced denial, and no denial of a guest's QEMU (svirt_t) at all, in ``window``.
    The documented permissive domains (virtd_t ...) may log permissive=1 records."""
    bad = [r.line for r in window.records() if not r.permissive or "svirt_t" in r.line]
    assert bad == [], "\n".join(bad)


@contextmanager
def data_file(prefix: str) -> Iterator[str]:
    """A 16 MiB raw file in a folder of its own under /var/tmp (QEMU's user can reach it)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))
    folder.chmod(0o755)
    try:
        yield str(sparse_file(folder / "volume.raw"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
