"""What a guest sees, without a guest OS: qemu-io and ``query-block`` through QEMU's monitor.

``qemu-io -d <alias>`` (HMP) reads and writes through the guest's own block backend, so it shows
exactly what the guest would see: a pattern written by one guest read by another, a write refused
on a read-only attachment. Facts measured with libvirt 9.0 / QEMU 7.2:

* ``-d`` takes the *qdev id*, which for a libvirt disk is its ``<alias name=.../>``
  (``ua-test1``); without ``-d`` it takes a block node name (``libvirt-1-format``).
* qemu-io's normal output (``wrote ...``, ``read ...``, ``Pattern verification failed``) goes to
  QEMU's stdout, the domain log, and the HMP reply is empty; errors raised before qemu-io runs
  (``Block node is read-only``, ``Error: Device 'x' not found``) come back in the reply.
  :func:`qemu_io` returns both, reading the log up to a unique end marker (nothing signals it:
  the log is polled, with a deadline).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import libvirt
import libvirt_qemu

from testhosts.guests.embed import embed_root_of


class QemuIoError(RuntimeError):
    """qemu-io did not produce the expected result; ``output`` holds what it said."""

    def __init__(self, message: str, output: str) -> None:
        super().__init__(f"{message}: {output!r}")
        self.output = output


class ReadOnlyWrite(QemuIoError):
    """A write was refused: ``Block node is read-only``."""


_LIBVIRT_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+[+-]\d{4}: ")
_qemu_io_lock = threading.Lock()


def domain_log_path(dom: libvirt.virDomain) -> Path:
    """Where QEMU's stdout/stderr for ``dom`` goes.

    ``qemu:///system``: ``/var/log/libvirt/qemu/NAME.log``;
    ``qemu:///embed?root=R``: ``R/log/qemu/NAME.log``.
    """
    uri = dom.connect().getURI()
    root = embed_root_of(uri)
    if root is not None:
        return root / "log" / "qemu" / f"{dom.name()}.log"
    if uri.startswith("qemu:///session"):
        cache = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
        return Path(cache, "libvirt", "qemu", "log", f"{dom.name()}.log")
    return Path("/var/log/libvirt/qemu", f"{dom.name()}.log")


def _log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _hmp(dom: libvirt.virDomain, command: str) -> str:
    reply = libvirt_qemu.qemuMonitorCommand(
        dom, command, libvirt_qemu.VIR_DOMAIN_QEMU_MONITOR_COMMAND_HMP
    )
    return reply.replace("\r\n", "\n").strip()


def qemu_io(
    dom: libvirt.virDomain,
    device: str,
    command: str,
    *,
    node: bool = False,
    timeout: float = 10.0,
) -> str:
    """Run ``qemu-io -d <device> "<command>"`` in ``dom``'s QEMU; return its output.

    ``device`` is the qdev id, i.e. the libvirt alias (``ua-test1``); with
    ``node=True`` it is a block node name (``libvirt-1-format``) and ``-d``
    is left out.

    QEMU 7.2 prints qemu-io's output on its stdout (the domain log) and
    returns an empty HMP reply, while early errors come back in the reply.
    To find the end of the output in the log, an unknown qemu-io command
    with a unique name is sent afterwards as a marker; its ``command "..."
    not found`` line closes the output.  The result is the reply followed by
    the log lines in between (libvirt's own timestamped log lines removed).
    """
    if '"' in command or "\n" in command:
        raise ValueError(f"qemu-io command may not contain quotes/newlines: {command!r}")
    if not re.fullmatch(r"[A-Za-z0-9_.#:/-]+", device):
        raise ValueError(f"unsafe device name: {device!r}")
    target = device if node else f"-d {device}"
    log_path = domain_log_path(dom)
    marker = f"vdtest-marker-{uuid.uuid4().hex}"
    with _qemu_io_lock:
        offset = _log_size(log_path)
        reply = _hmp(dom, f'qemu-io {target} "{command}"')
        marker_reply = _hmp(dom, f'qemu-io {target} "{marker}"')
        if marker in marker_reply:
            # This QEMU answers qemu-io output on the monitor: nothing in the log.
            return reply
        if marker_reply:
            # The marker itself failed before qemu-io ran (device gone etc.).
            return reply
        logged = _read_log_until(log_path, offset, marker, timeout)
    parts = [reply] if reply else []
    parts += [ln for ln in logged if not _LIBVIRT_LOG_LINE.match(ln)]
    return "\n".join(parts).strip()


def _read_log_until(path: Path, offset: int, marker: str, timeout: float) -> list[str]:
    """Lines appended to ``path`` after ``offset`` up to the marker line."""
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        try:
            with open(path, "rb") as fh:
                if os.fstat(fh.fileno()).st_size < offset:
                    offset = 0  # truncated/rotated
                fh.seek(offset)
                text = fh.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            text = ""
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if marker in line:
                return lines[:i]
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"qemu-io marker did not appear in {path} within {timeout}s; "
                f"new log text: {text!r}"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _pattern_io(dom: libvirt.virDomain, device: str, verb: str, pattern: int, offset: int,
                length: int, node: bool) -> str:
    """qemu-io's ``write -P`` / ``read -P``; raises QemuIoError unless it did all ``length``."""
    if not 0 <= pattern <= 0xFF:
        raise ValueError("pattern must be a byte value")
    out = qemu_io(dom, device, f"{verb} -P {pattern:#04x} {offset} {length}", node=node)
    if "Block node is read-only" in out:
        raise ReadOnlyWrite(f"{verb} refused", out)
    if "Pattern verification failed" in out:
        return out
    done = "wrote" if verb == "write" else verb
    if f"{done} {length}/{length} bytes at offset {offset}" not in out:
        raise QemuIoError(f"{verb} failed", out)
    return out


def write_pattern(dom: libvirt.virDomain, device: str, pattern: int, offset: int = 0,
                  length: int = 4096, *, node: bool = False) -> str:
    """Write ``length`` bytes of ``pattern`` at ``offset`` through the guest's backend.

    Raises :class:`ReadOnlyWrite` if QEMU refuses (``Block node is read-only``) and
    :class:`QemuIoError` for any other failure; returns the qemu-io output.
    """
    return _pattern_io(dom, device, "write", pattern, offset, length, node)


def read_pattern(dom: libvirt.virDomain, device: str, pattern: int, offset: int = 0,
                 length: int = 4096, *, node: bool = False) -> bool:
    """True if ``length`` bytes at ``offset`` all equal ``pattern``.

    False on ``Pattern verification failed``; :class:`QemuIoError` if the read itself failed.
    """
    return "Pattern verification failed" not in _pattern_io(dom, device, "read", pattern,
                                                            offset, length, node)


# ---- QMP query-block ----------------------------------------------------------------------------

def query_block(dom: libvirt.virDomain) -> list[dict[str, Any]]:
    """The ``return`` of QMP ``query-block`` for ``dom``."""
    reply = libvirt_qemu.qemuMonitorCommand(dom, '{"execute":"query-block"}', 0)
    data = json.loads(reply)
    if "error" in data:
        raise RuntimeError(f"query-block failed: {data['error']}")
    result: list[dict[str, Any]] = data["return"]
    return result


@dataclasses.dataclass(frozen=True)
class BlockInfo:
    alias: str
    qdev: str
    node_name: str | None
    ro: bool
    direct: bool  # cache.direct: O_DIRECT (cache='none' / 'directsync')
    writeback: bool  # cache.writeback: guest sees a volatile write cache
    no_flush: bool
    file: str  # inserted.file, e.g. /tmp/x.raw or /dev/loop3
    filename: str | None  # inserted.image.filename
    driver: str  # format driver, e.g. raw, qcow2
    raw: dict[str, Any]


def _qdev_matches(qdev: str, alias: str) -> bool:
    # SCSI disks: "ua-test1"; virtio-blk: "/machine/peripheral/ua-x/virtio-backend".
    return qdev == alias or alias in qdev.split("/")


def block_info(dom: libvirt.virDomain, alias: str) -> BlockInfo:
    """``ro``, cache flags and opened file of the disk with libvirt alias ``alias``."""
    for entry in query_block(dom):
        qdev = entry.get("qdev", "")
        if not (_qdev_matches(qdev, alias) or entry.get("device") == alias):
            continue
        inserted = entry.get("inserted")
        if inserted is None:
            raise LookupError(f"{alias} on {dom.name()} has no medium inserted")
        cache = inserted.get("cache", {})
        return BlockInfo(
            alias=alias, qdev=qdev, node_name=inserted.get("node-name"),
            ro=bool(inserted["ro"]), direct=bool(cache.get("direct", False)),
            writeback=bool(cache.get("writeback", False)),
            no_flush=bool(cache.get("no-flush", False)), file=inserted.get("file", ""),
            filename=inserted.get("image", {}).get("filename"), driver=inserted.get("drv", ""),
            raw=entry,
        )
    raise LookupError(f"no block device {alias!r} in {dom.name()}")
