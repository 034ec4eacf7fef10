"""OS-less guests: their XML, connections with events, and starting and removing them.

A guest needs no operating system for hot-plug: 96-128 MiB, no disk, one virtio-scsi controller.
SCSI hot-unplug completes without a guest to acknowledge it. ``virDomainDestroy`` takes about
1.5 s on these machines (QEMU exits at once, but PID 1 reaps the orphan late and libvirt waits for
the pid), so :meth:`Guests.close` removes guests in parallel.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import secrets
from collections.abc import Callable
from types import TracebackType
from typing import Any

import libvirt

from virtdriver.hypervisor.capabilities import kvm_available

SYSTEM_URI = "qemu:///system"
NAME_PREFIX = "vdtest-"
#: The daemons that can serve ``qemu:///system``, and their sockets under /run/libvirt: the
#: monolithic libvirtd, or the split daemons' virtqemud (RHEL's layout: no libvirt-sock).
SYSTEM_SOCKETS = {"libvirtd": "libvirt-sock", "virtqemud": "virtqemud-sock"}

#: What QEMU or libvirt say when a ``type='kvm'`` guest cannot use KVM after all.
KVM_FAILURE_MARKERS = (
    "Could not access KVM kernel module",
    "failed to initialize kvm",
    "failed to initialize KVM",
    "does not support virt type 'kvm'",
    "KVM is not available",
)


def guest_xml(name: str, *, kvm: bool, memory_mib: int = 128, acpi: bool = False) -> str:
    """XML of an OS-less guest with one virtio-scsi controller (index 0).

    ``kvm`` selects ``<domain type='kvm'>``, otherwise TCG (``type='qemu'``). ``acpi`` adds
    ``<features><acpi/></features>``: virtio disks then hot-plug, but their unplug waits for a
    guest OS that this guest does not have.
    """
    if not re.fullmatch(r"[A-Za-z0-9_.+-]+", name):
        raise ValueError(f"unsafe domain name: {name!r}")
    dom_type = "kvm" if kvm else "qemu"
    features = "\n  <features><acpi/></features>" if acpi else ""
    return f"""<domain type='{dom_type}'>
  <name>{name}</name>
  <memory unit='MiB'>{int(memory_mib)}</memory>
  <currentMemory unit='MiB'>{int(memory_mib)}</currentMemory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64'>hvm</type>
  </os>{features}
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <controller type='scsi' index='0' model='virtio-scsi'/>
    <memballoon model='none'/>
  </devices>
</domain>
"""


# ---- connections --------------------------------------------------------------------------------

def ensure_event_loop() -> None:
    """Run libvirt's default event loop in a daemon thread (idempotent, shared with the driver).

    Events (DEVICE_REMOVED) reach only connections opened *after* this, and ``qemu:///embed``
    refuses to open without it: call it before the first ``libvirt.open`` of the process.
    """
    from virtdriver.hypervisor.events import ensure_event_loop as start_loop

    start_loop()


def quiet_libvirt_errors() -> None:
    """Stop libvirt's default handler printing every error to stderr (process-wide).

    Errors still raise ``libvirtError``; only the ``libvirt: QEMU Driver error : ...`` lines go.
    """
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)


def open_connection(uri: str = SYSTEM_URI, *, quiet: bool = True) -> libvirt.virConnect:
    """``libvirt.open(uri)`` with the event loop running; ``quiet`` silences libvirt's stderr."""
    ensure_event_loop()
    if quiet:
        quiet_libvirt_errors()
    conn = libvirt.open(uri)
    if conn is None:  # pragma: no cover - old bindings returned None
        raise libvirt.libvirtError(f"cannot open {uri}")
    return conn


def system_daemon(run_dir: str = "/run/libvirt") -> str | None:
    """The daemon whose socket serves ``qemu:///system`` here (libvirtd first), or ``None``."""
    for daemon, socket in SYSTEM_SOCKETS.items():
        if os.path.exists(os.path.join(run_dir, socket)):
            return daemon
    return None


# ---- guests -------------------------------------------------------------------------------------

def ignore_gone(func: Callable[[], Any]) -> None:
    """Call ``func`` (a destroy or undefine); a guest already gone or stopped is no error."""
    try:
        func()
    except libvirt.libvirtError as exc:
        if exc.get_error_code() not in (libvirt.VIR_ERR_NO_DOMAIN,
                                        libvirt.VIR_ERR_OPERATION_INVALID):
            raise


class Guests:
    """Starts OS-less guests and removes them all again on :meth:`close`.

    Names are ``<prefix>[<name>-]<8 hex>``; with ``unique=False`` a name is used as given (an
    embedded driver of one's own has no other users). ``kvm=None`` (default) uses KVM when
    :func:`kvm_available` and falls back to TCG for the rest of this object's life if QEMU cannot
    initialise KVM after all; ``self.kvm`` tells which was used last.
    """

    def __init__(self, conn: libvirt.virConnect, *, kvm: bool | None = None,
                 memory_mib: int = 128, prefix: str = NAME_PREFIX, unique: bool = True) -> None:
        self.conn = conn
        self._auto_kvm = kvm is None
        self.kvm: bool = kvm_available() if kvm is None else kvm
        self.memory_mib = memory_mib
        self.prefix = prefix
        self.unique = unique
        self.kvm_fallback_reason: str | None = None
        self._made: dict[str, bool] = {}  # name -> persistent?

    def __enter__(self) -> Guests:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def names(self) -> list[str]:
        return list(self._made)

    def unique_name(self, name: str | None = None) -> str:
        if not self.unique and name:
            return f"{self.prefix}{name}"
        base = f"{self.prefix}{name}-" if name else self.prefix
        return f"{base}{secrets.token_hex(4)}"

    def start(self, name: str | None = None, persistent: bool = True, *,
              acpi: bool = False) -> libvirt.virDomain:
        """Define and start (or, if not ``persistent``, create) a new guest."""
        full = self.unique_name(name)
        try:
            return self._start(full, persistent, self.kvm, acpi)
        except libvirt.libvirtError as exc:
            msg = str(exc)
            if not (self.kvm and self._auto_kvm and any(m in msg for m in KVM_FAILURE_MARKERS)):
                raise
            self.kvm = False
            self.kvm_fallback_reason = msg
            return self._start(full, persistent, False, acpi)

    def _start(self, name: str, persistent: bool, kvm: bool, acpi: bool) -> libvirt.virDomain:
        xml = guest_xml(name, kvm=kvm, memory_mib=self.memory_mib, acpi=acpi)
        # Recorded before it exists: an interrupt right after the create must not leak it.
        self._made[name] = persistent
        try:
            if not persistent:
                return self.conn.createXML(xml, 0)
            dom = self.conn.defineXML(xml)
            try:
                dom.create()
            except libvirt.libvirtError:
                ignore_gone(dom.undefine)
                raise
            return dom
        except libvirt.libvirtError:
            del self._made[name]
            raise

    def adopt(self, name: str, persistent: bool = True) -> None:
        """Remove ``name`` with the others, too (a guest that arrived here by migration)."""
        self._made[name] = persistent

    def start_named(self, name: str, persistent: bool = True) -> libvirt.virDomain:
        """Start a guest with exactly this name (another host's guest of the same name)."""
        return self._start(name, persistent, self.kvm, False)

    def remove(self, name: str) -> None:
        """Destroy and (if persistent) undefine one guest, ignoring gone ones."""
        persistent = self._made.pop(name, True)
        try:
            dom = self.conn.lookupByName(name)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                return
            raise
        ignore_gone(dom.destroy)
        if persistent:
            ignore_gone(dom.undefine)

    def remove_all(self) -> list[tuple[str, BaseException]]:
        """Remove every guest this object made, in parallel; returns the failures by name.

        Destroying takes about 1.5 s a guest here (libvirt waits for PID 1 to reap QEMU), so
        removing them together keeps teardown at one such delay.
        """
        names = list(self._made)
        if not names:
            return []
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, len(names))) as pool:
            futures = [(n, pool.submit(self.remove, n)) for n in names]
            failed = [(n, fut.exception()) for n, fut in futures]
        return [(n, exc) for n, exc in failed if exc is not None]

    def close(self) -> None:
        """:meth:`remove_all`; the first failure is raised after all guests were tried."""
        failed = self.remove_all()
        if failed:
            raise failed[0][1]
