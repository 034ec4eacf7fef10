"""Support for hypervisor tests on real, OS-less KVM/QEMU guests.

Nothing here mocks libvirt: every helper talks to a real libvirtd
(``qemu:///system``) or to the in-process embedded driver
(``qemu:///embed?root=DIR``).

Facts this module relies on (measured with libvirt 9.0 / QEMU 7.2):

* A guest needs no OS for hot-plug: 128 MiB, no disk, one virtio-scsi
  controller.  SCSI hot-unplug completes without guest co-operation.
* ``qemu-io -d <alias>`` (HMP) takes the *qdev id*, which for a libvirt disk is
  its ``<alias name=.../>`` (``ua-test1``).  Without ``-d`` it takes a block
  node name (``libvirt-1-format``).  The ``drive-scsi0-0-0-N`` names of
  pre-blockdev libvirt do not exist any more.
* qemu-io's normal output (``wrote ...``, ``read ...``, ``Pattern verification
  failed``) is printed on QEMU's stdout, i.e. into the domain log, and the HMP
  reply is empty.  Errors raised before qemu-io runs (``Block node is
  read-only``, ``Error: Device 'x' not found``) come back in the HMP reply.
  :func:`qemu_io` returns both.
* Events (DEVICE_REMOVED) are only delivered on connections opened *after* an
  event loop implementation was registered: call :func:`ensure_event_loop`
  (or use :func:`open_connection`) before the first ``libvirt.open`` of the
  process.  The embedded driver refuses to open at all without one.
* Only one embedded driver root can be used per process (a second root fails
  closed); use :func:`process_embed_root`.
* KVM works under embed only when the root's ``etc/qemu.conf`` makes QEMU run
  as root (:func:`prepare_embed_root`); with the defaults QEMU runs as
  ``libvirt-qemu`` and gets "Could not access KVM kernel module: Permission
  denied" (:class:`Guests` then falls back to TCG, but each start there took
  ~40 s and a 0700 root dir is unreadable for that user).
* ``virDomainDestroy`` takes ~1.5 s on these machines: QEMU exits at once but
  PID 1 reaps the orphaned process late and libvirt waits for the pid to go.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import dataclasses
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Callable

import libvirt
import libvirt_qemu

from virtdriver.guestio import (
    QemuIoError,
    ReadOnlyWrite,
    domain_log_path,
    embed_root_of,
    guest_xml,
    kvm_available,
    qemu_io,
    read_pattern,
    write_pattern,
)

__all__ = [
    "BlockInfo",
    "DeviceEvents",
    "EMBED_CAPS_SEEDS",
    "EMBED_QEMU_CONF",
    "Guests",
    "LoopDevice",
    "NAME_PREFIX",
    "QemuIoError",
    "ReadOnlyWrite",
    "SYSTEM_URI",
    "block_info",
    "detach_and_wait",
    "domain_log_path",
    "embed_root_of",
    "embed_uri",
    "ensure_event_loop",
    "guest_xml",
    "kvm_available",
    "open_connection",
    "prepare_embed_root",
    "process_embed_root",
    "qemu_io",
    "query_block",
    "quiet_libvirt_errors",
    "read_pattern",
    "write_pattern",
]

SYSTEM_URI = "qemu:///system"
NAME_PREFIX = "vdtest-"

#: qemu.conf written into an embedded driver's root.  Without it the embedded
#: QEMU runs as ``libvirt-qemu`` under the DAC driver and cannot open
#: ``/dev/kvm`` (``crw------- root``): "Could not access KVM kernel module:
#: Permission denied".  With it KVM works under embed as well.
EMBED_QEMU_CONF = 'user = "root"\ngroup = "root"\nsecurity_driver = "none"\n'

_KVM_FAILURE_MARKERS = (
    "Could not access KVM kernel module",
    "failed to initialize kvm",
    "failed to initialize KVM",
    "does not support virt type 'kvm'",
    "KVM is not available",
)


# --------------------------------------------------------------------------
# Domain XML
# --------------------------------------------------------------------------


# --------------------------------------------------------------------------
# Event loop and connections
# --------------------------------------------------------------------------

def ensure_event_loop() -> None:
    """Register libvirt's default event loop and run it in a daemon thread.

    Idempotent; once per process, shared with virtdriver's own (two loops in one process would
    compete for the same events). Must happen before the connections whose events you want are
    opened (and before any ``qemu:///embed`` open).
    """
    from virtdriver.hypervisor.events import ensure_event_loop as start_loop

    start_loop()


def quiet_libvirt_errors() -> None:
    """Stop libvirt's default handler printing every error to stderr.

    Errors still raise ``libvirtError``; this only removes the
    ``libvirt: QEMU Driver error : ...`` lines (process-wide).
    """
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)


def open_connection(uri: str = SYSTEM_URI, *, quiet: bool = True) -> libvirt.virConnect:
    """``libvirt.open(uri)`` after making sure the event loop is running.

    ``quiet`` calls :func:`quiet_libvirt_errors` first.
    """
    ensure_event_loop()
    if quiet:
        quiet_libvirt_errors()
    conn = libvirt.open(uri)
    if conn is None:  # pragma: no cover - old bindings returned None
        raise libvirt.libvirtError(f"cannot open {uri}")
    return conn


def embed_uri(root: str | os.PathLike[str]) -> str:
    return f"qemu:///embed?root={os.fspath(root)}"


def prepare_embed_root(root: str | os.PathLike[str]) -> str:
    """Create ``root/etc/qemu.conf`` (QEMU as root, no security driver).

    Returns the embed URI.  Keep ``root`` short: the monitor socket lives at
    ``root/lib/qemu/domain-N-<name[:20]>/monitor.sock`` and UNIX socket paths
    are limited to 107 bytes.
    """
    etc = Path(root, "etc")
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "qemu.conf").write_text(EMBED_QEMU_CONF)
    return embed_uri(root)


_embed_root_lock = threading.Lock()
_embed_root: Path | None = None

#: QEMU capability caches copied into a fresh embed root.  Without one the
#: embedded driver probes QEMU on the first guest start (about 4 s here);
#: with one that start takes about 0.4 s.  libvirt re-validates the copied
#: XML (QEMU/libvirt ctimes, versions) and re-probes if it is stale.
EMBED_CAPS_SEEDS = (
    Path("/var/tmp/vdtest-embed-qemu-caps"),
    Path("/var/cache/libvirt/qemu/capabilities"),
)
_CAPS_SUBDIR = Path("cache", "qemu", "capabilities")


def _seed_embed_caps(root: Path) -> None:
    dest = root / _CAPS_SUBDIR
    for seed in EMBED_CAPS_SEEDS:
        try:
            files = [f for f in seed.iterdir() if f.suffix == ".xml"]
        except OSError:
            continue
        if not files:
            continue
        dest.mkdir(parents=True, exist_ok=True)
        for f in files:
            with contextlib.suppress(OSError):
                shutil.copyfile(f, dest / f.name)
        return


def _save_embed_caps(root: Path) -> None:
    seed = EMBED_CAPS_SEEDS[0]
    try:
        seed.mkdir(parents=True, exist_ok=True)
        for f in (root / _CAPS_SUBDIR).glob("*.xml"):
            tmp = seed / f".{f.name}.{os.getpid()}"
            shutil.copyfile(f, tmp)
            os.replace(tmp, seed / f.name)
    except OSError:
        pass


def _cleanup_embed_root(root: Path) -> None:
    _save_embed_caps(root)
    shutil.rmtree(root, ignore_errors=True)


def process_embed_root() -> Path:
    """The one embedded-driver root of this process (created on first use).

    libvirt allows a single embedded QEMU driver root per process (a second
    one fails with "already open with path ..."), so all tests share it.  It
    is a short directory under /tmp, prepared with :func:`prepare_embed_root`
    and seeded with a QEMU capabilities cache, and is removed when the
    process exits.
    """
    global _embed_root
    with _embed_root_lock:
        if _embed_root is None:
            root = Path(tempfile.mkdtemp(prefix="vdemb-", dir="/tmp"))
            prepare_embed_root(root)
            _seed_embed_caps(root)
            atexit.register(_cleanup_embed_root, root)
            _embed_root = root
        return _embed_root


# --------------------------------------------------------------------------
# Guests
# --------------------------------------------------------------------------


def _ignore_gone(func: Callable[[], Any]) -> None:
    try:
        func()
    except libvirt.libvirtError as exc:
        if exc.get_error_code() not in (
            libvirt.VIR_ERR_NO_DOMAIN,
            libvirt.VIR_ERR_OPERATION_INVALID,
        ):
            raise


class Guests:
    """Starts uniquely named OS-less guests and removes them all on close().

    ``kvm=None`` (default) uses KVM when :func:`kvm_available` and falls back
    to TCG (for the rest of this object's life) if QEMU cannot initialise KVM,
    which is what happens under ``qemu:///embed`` without
    :data:`EMBED_QEMU_CONF`.  ``self.kvm`` tells which was used last.
    """

    def __init__(
        self,
        conn: libvirt.virConnect,
        *,
        kvm: bool | None = None,
        memory_mib: int = 128,
        prefix: str = NAME_PREFIX,
    ) -> None:
        self.conn = conn
        self._auto_kvm = kvm is None
        self.kvm: bool = kvm_available() if kvm is None else kvm
        self.memory_mib = memory_mib
        self.prefix = prefix
        self.kvm_fallback_reason: str | None = None
        # name -> persistent?
        self._made: dict[str, bool] = {}

    # -- context manager ----------------------------------------------------
    def __enter__(self) -> Guests:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- API ----------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self._made)

    def unique_name(self, name: str | None = None) -> str:
        base = f"{self.prefix}{name}-" if name else self.prefix
        return f"{base}{secrets.token_hex(4)}"

    def start(
        self, name: str | None = None, persistent: bool = True
    ) -> libvirt.virDomain:
        """Define and start (or, if not persistent, create) a new guest.

        The domain is named ``vdtest-[<name>-]<8 hex>``.
        """
        full = self.unique_name(name)
        try:
            return self._start(full, persistent, self.kvm)
        except libvirt.libvirtError as exc:
            msg = str(exc)
            if not (
                self.kvm
                and self._auto_kvm
                and any(m in msg for m in _KVM_FAILURE_MARKERS)
            ):
                raise
            self.kvm = False
            self.kvm_fallback_reason = msg
            return self._start(full, persistent, False)

    def _start(self, name: str, persistent: bool, kvm: bool) -> libvirt.virDomain:
        xml = guest_xml(name, kvm=kvm, memory_mib=self.memory_mib)
        if persistent:
            dom = self.conn.defineXML(xml)
            self._made[name] = True
            try:
                dom.create()
            except libvirt.libvirtError:
                _ignore_gone(dom.undefine)
                del self._made[name]
                raise
        else:
            dom = self.conn.createXML(xml, 0)
            self._made[name] = False
        return dom

    def remove(self, name: str) -> None:
        """Destroy and (if persistent) undefine one guest, ignoring gone ones."""
        persistent = self._made.pop(name, True)
        try:
            dom = self.conn.lookupByName(name)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                return
            raise
        _ignore_gone(dom.destroy)
        if persistent:
            _ignore_gone(dom.undefine)

    def close(self) -> None:
        """Remove every guest this object made, in parallel.

        Destroying a guest takes about 1.5 s here because libvirt waits until
        the QEMU pid is gone and PID 1 of this machine reaps orphans slowly;
        removing guests concurrently keeps teardown at one such delay.  The
        first error is raised after all guests were tried.
        """
        names = list(self._made)
        if not names:
            return
        errors: list[BaseException] = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, len(names))) as ex:
            for fut in [ex.submit(self.remove, n) for n in names]:
                exc = fut.exception()
                if exc is not None:
                    errors.append(exc)
        if errors:
            raise errors[0]


# --------------------------------------------------------------------------
# Device events / detach
# --------------------------------------------------------------------------


class DeviceEvents:
    """Collects VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED events of one connection.

    Register it *before* the detach so that an early event is not lost.  The
    connection must have been opened after :func:`ensure_event_loop`.
    """

    def __init__(self, conn: libvirt.virConnect) -> None:
        self.conn = conn
        self._cond = threading.Condition()
        self._removed: list[tuple[str, str]] = []  # (domain UUID, alias)
        self._callback_id: int | None = conn.domainEventRegisterAny(
            None, libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED, self._on_removed, None
        )

    def _on_removed(
        self, conn: libvirt.virConnect, dom: libvirt.virDomain, alias: str, opaque: Any
    ) -> None:
        with self._cond:
            self._removed.append((dom.UUIDString(), alias))
            self._cond.notify_all()

    def removed(self) -> list[tuple[str, str]]:
        with self._cond:
            return list(self._removed)

    def wait_removed(
        self, dom: libvirt.virDomain, alias: str, timeout: float = 10.0
    ) -> None:
        """Wait for (and consume) the DEVICE_REMOVED event of ``alias`` on ``dom``."""
        key = (dom.UUIDString(), alias)
        deadline = time.monotonic() + timeout
        with self._cond:
            while key not in self._removed:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"no DEVICE_REMOVED for {alias} on {dom.name()} in {timeout}s"
                    )
                self._cond.wait(left)
            self._removed.remove(key)

    def close(self) -> None:
        if self._callback_id is not None:
            with contextlib.suppress(libvirt.libvirtError):
                self.conn.domainEventDeregisterAny(self._callback_id)
            self._callback_id = None

    def __enter__(self) -> DeviceEvents:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def detach_and_wait(
    events: DeviceEvents,
    dom: libvirt.virDomain,
    device_xml: str,
    alias: str,
    *,
    timeout: float = 10.0,
    flags: int = libvirt.VIR_DOMAIN_AFFECT_LIVE,
) -> float:
    """``detachDeviceFlags`` then wait for DEVICE_REMOVED; returns seconds taken."""
    started = time.monotonic()
    dom.detachDeviceFlags(device_xml, flags)
    events.wait_removed(dom, alias, timeout)
    return time.monotonic() - started


# --------------------------------------------------------------------------
# QMP query-block
# --------------------------------------------------------------------------


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
            alias=alias,
            qdev=qdev,
            node_name=inserted.get("node-name"),
            ro=bool(inserted["ro"]),
            direct=bool(cache.get("direct", False)),
            writeback=bool(cache.get("writeback", False)),
            no_flush=bool(cache.get("no-flush", False)),
            file=inserted.get("file", ""),
            filename=inserted.get("image", {}).get("filename"),
            driver=inserted.get("drv", ""),
            raw=entry,
        )
    raise LookupError(f"no block device {alias!r} in {dom.name()}")


# --------------------------------------------------------------------------
# Loop devices
# --------------------------------------------------------------------------


def sparse_file(path: str | os.PathLike[str], size: int = 16 << 20) -> Path:
    """A sparse file of ``size`` bytes at ``path`` (a raw volume image), created or resized."""
    with open(path, "wb") as fh:
        fh.truncate(size)
    return Path(path)


class LoopDevice:
    """A loop device over a sparse file in a private temp dir.

    ``losetup --find --show FILE`` on enter; on exit exactly that device is
    detached (``losetup -d DEV``, never ``-D``) and the temp dir removed.
    ``device`` is e.g. ``/dev/loop3``; ``backing_file`` the sparse file.
    """

    def __init__(
        self, size: int = 64 * 1024 * 1024, *, directory: str | os.PathLike[str] | None = None
    ) -> None:
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
            raise RuntimeError(f"already attached as {self.device}")
        self._tmpdir = tempfile.mkdtemp(prefix="vdloop-", dir=self._parent)
        backing = sparse_file(Path(self._tmpdir, "backing.raw"), self.size)
        self.backing_file = backing
        try:
            out = subprocess.run(
                ["losetup", "--find", "--show", str(backing)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
        except BaseException:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
            raise
        if not re.fullmatch(r"/dev/loop\d+", out):
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            raise RuntimeError(f"unexpected losetup output: {out!r}")
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
            raise RuntimeError("not attached")
        with open(self.backing_file, "r+b") as fh:
            fh.truncate(new_size)
        subprocess.run(["losetup", "-c", self.device], check=True, capture_output=True)
        self.size = new_size

    def detach(self) -> None:
        dev, self.device = self.device, None
        try:
            if dev is not None:
                proc = subprocess.run(
                    ["losetup", "-d", dev], capture_output=True, text=True
                )
                if proc.returncode != 0 and "No such device" not in proc.stderr:
                    raise RuntimeError(f"losetup -d {dev} failed: {proc.stderr.strip()}")
        finally:
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
                self._tmpdir = None
