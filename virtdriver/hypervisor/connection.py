"""The libvirt connection: opened after the event loop, reopened when libvirtd went away."""

from __future__ import annotations

import re
import threading

import libvirt

from virtdriver.config.model import parse_xml
from virtdriver.errors import HypervisorError, InstanceNotFound
from virtdriver.hypervisor.domains import ListedDomain, list_domains
from virtdriver.hypervisor.events import DomainEvents, ensure_event_loop

_UUID = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
                   r"[0-9a-fA-F]{12}")


def _silence(ctx: object, err: object) -> None:
    """libvirt prints every error to stderr by default; ours are reported as typed errors."""


libvirt.registerErrorHandler(_silence, None)


def security_models(capabilities_xml: str) -> tuple[str, ...]:
    """The ``<secmodel><model>`` names of libvirt's host capabilities, in libvirt's order."""
    root = parse_xml(capabilities_xml)
    return tuple(m.text.strip() for m in root.iterfind("host/secmodel/model") if m.text)


def libvirt_message(exc: libvirt.libvirtError) -> str:
    return exc.get_error_message() or str(exc)


class Connection:
    """One libvirt connection per driver, shared by its threads, with device-removal events."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.events = DomainEvents()
        self._conn: libvirt.virConnect | None = None
        self._lock = threading.Lock()
        self._models: tuple[libvirt.virConnect, tuple[str, ...]] | None = None

    def get(self) -> libvirt.virConnect:
        """The open connection; reopened (events re-registered) if libvirtd restarted."""
        with self._lock:
            conn = self._conn
            if conn is not None:
                try:
                    if conn.isAlive():
                        return conn
                except libvirt.libvirtError:
                    pass
                self._conn = None
            ensure_event_loop()
            try:
                conn = libvirt.open(self.uri)
            except libvirt.libvirtError as exc:
                raise HypervisorError(f"cannot connect to libvirt at {self.uri}",
                                      libvirt_message(exc)) from None
            self.events.register(conn)
            self._conn = conn
            return conn

    def list_domains(self) -> list[ListedDomain]:
        """Every domain on the host with its flags, asked of libvirt now."""
        return list_domains(self.get())

    def security_models(self) -> tuple[str, ...]:
        """The security drivers this libvirt runs (``selinux``, ``apparmor``, ``dac``), from its
        capabilities; read once per connection (libvirtd chooses them when it starts)."""
        conn = self.get()
        cached = self._models
        if cached is not None and cached[0] is conn:
            return cached[1]
        try:
            models = security_models(conn.getCapabilities())
        except libvirt.libvirtError as exc:
            raise HypervisorError("cannot read libvirt's host capabilities",
                                  libvirt_message(exc)) from None
        self._models = (conn, models)
        return models

    def domain(self, instance: str) -> libvirt.virDomain:
        """A domain by UUID or name."""
        conn = self.get()
        lookups = ([conn.lookupByUUIDString, conn.lookupByName] if _UUID.fullmatch(instance)
                   else [conn.lookupByName])
        for lookup in lookups:
            try:
                return lookup(instance)
            except libvirt.libvirtError as exc:
                if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                    raise HypervisorError(f"cannot look up guest {instance!r}",
                                          libvirt_message(exc)) from None
        raise InstanceNotFound(f"no guest named or with UUID {instance!r} on {self.uri}")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                except libvirt.libvirtError:
                    pass
                self._conn = None
