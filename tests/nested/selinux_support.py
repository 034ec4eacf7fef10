"""Label readers and checks shared by the SELinux tests of the nested host (not a test module)."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from testhosts.guests import sparse_file
from tests.nested.conftest import AuditWindow, run, split_context

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


#: The test harness's own processes (virsh, python: unconfined_t, run from the test's shell) are
#: sometimes refused ``execmem`` by Debian's policy (``allow_execmem`` off) under TCG; nothing of
#: virtdriver, libvirtd or a guest runs in that domain, and the refused process carries on (the
#: CI run that showed it: a ``virsh attach-disk`` of the unshared test, which then succeeded).
_HARNESS_EXECMEM = re.compile(r"denied\s+\{ execmem \} .*"
                              r"scontext=unconfined_u:unconfined_r:unconfined_t:\S+ "
                              r"tcontext=unconfined_u:unconfined_r:unconfined_t:\S+ "
                              r"tclass=process")


def no_guest_denials(window: AuditWindow) -> None:
    """No enforced denial, and no denial of a guest's QEMU (svirt_t) at all, in ``window``.
    The documented permissive domains (virtd_t ...) may log permissive=1 records; the test
    harness's own execmem refusals (:data:`_HARNESS_EXECMEM`) are not the product's."""
    bad = [r.line for r in window.records()
           if "svirt_t" in r.line or not (r.permissive or _HARNESS_EXECMEM.search(r.line))]
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
