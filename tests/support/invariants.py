"""Invariants of the driver's state, checked against libvirt's own view (not the driver's code).

Read straight from libvirt with lxml, so a bug in virtdriver's own readers cannot hide itself:

- a host-connection record exists exactly when at least one guest on the host has the volume;
- a volume that is not multiattach is in at most one guest;
- every attachment of a multiattach volume is ``<shareable/>`` with ``cache='none'``, in the live
  and in the persistent XML, and no attachment of a non-multiattach volume is shareable;
- a running persistent guest has a volume live exactly when its definition has it, in the same
  mode (no half attachments);
- QEMU agrees with the XML: read-only and O_DIRECT as rendered (``query-block``);
- nobody holds a volume lock once the operations are over.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

import libvirt
from lxml import etree

from testhosts.guests import block_info
from virtdriver.hypervisor.hostconn import HostConnections
from virtdriver.hypervisor.locks import lock_is_free


@dataclasses.dataclass(frozen=True)
class SeenDisk:
    domain: str
    live: bool
    shareable: bool
    readonly: bool
    cache: str | None
    source: str | None


def _disks(xml: str, alias: str, domain: str, live: bool) -> list[SeenDisk]:
    root = etree.fromstring(xml.encode())
    found = []
    for disk in root.iterfind("./devices/disk"):
        node = disk.find("alias")
        if node is None or node.get("name") != alias:
            continue
        driver, source = disk.find("driver"), disk.find("source")
        found.append(SeenDisk(
            domain, live, disk.find("shareable") is not None, disk.find("readonly") is not None,
            driver.get("cache") if driver is not None else None,
            (source.get("dev") or source.get("file")) if source is not None else None))
    return found


def volume_disks(conn: libvirt.virConnect, volume_id: str,
                 domains: Iterable[str] | None = None) -> list[SeenDisk]:
    """Every disk with alias ``ua-<volume_id>`` on the host, live and persistent."""
    alias = f"ua-{volume_id}"
    wanted = set(domains) if domains is not None else None
    seen: list[SeenDisk] = []
    for dom in conn.listAllDomains(0):
        try:
            name = dom.name()
            if wanted is not None and name not in wanted:
                continue
            active, persistent = bool(dom.isActive()), bool(dom.isPersistent())
            if active:
                seen += _disks(dom.XMLDesc(0), alias, name, True)
            if persistent:
                seen += _disks(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE), alias, name, False)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:  # vanished while we looked
                raise
    return seen


class InvariantChecker:
    """Checks the invariants above; ``passed`` counts every single check that held."""

    def __init__(self, conn: libvirt.virConnect, state_dir: Path,
                 volumes: dict[str, bool], *, qemu: bool = True) -> None:
        self.conn = conn
        self.records = HostConnections(state_dir)
        self.lock_dir = state_dir / "locks"
        self.volumes = volumes  # volume id -> multiattach
        self.qemu = qemu
        self.passed = 0

    def _ok(self, condition: bool, message: str) -> None:
        assert condition, message
        self.passed += 1

    def check(self, context: str = "") -> None:
        records = set(self.records.connected())
        for vid, multiattach in self.volumes.items():
            disks = volume_disks(self.conn, vid)
            users = sorted({d.domain for d in disks})
            where = f"{context} volume {vid[:8]} ({'multiattach' if multiattach else 'single'})"
            self._ok((vid in records) == bool(users),
                     f"{where}: host record {'present' if vid in records else 'absent'} but "
                     f"used by {users or 'nobody'}")
            if not multiattach:
                self._ok(len(users) <= 1, f"{where}: in several guests at once: {users}")
            for d in disks:
                label = f"{where} in {d.domain} ({'live' if d.live else 'persistent'})"
                if multiattach:
                    self._ok(d.shareable and d.cache == "none",
                             f"{label}: shareable={d.shareable} cache={d.cache}")
                else:
                    self._ok(not d.shareable, f"{label}: a non-multiattach disk is shareable")
            self._check_live_matches_config(where, disks)
            if self.qemu:
                self._check_qemu(where, vid, disks, multiattach)
            self._ok(lock_is_free(self.lock_dir, vid), f"{where}: its lock is still held")
        # Every other lock too (per-guest ones and any a future operation takes).
        for path in sorted(self.lock_dir.glob("volume-*.lock")):
            name = path.name[len("volume-"):-len(".lock")]
            self._ok(lock_is_free(self.lock_dir, name), f"{context} lock {path.name} still held")

    def _check_live_matches_config(self, where: str, disks: list[SeenDisk]) -> None:
        for name in {d.domain for d in disks}:
            try:
                dom = self.conn.lookupByName(name)
                active, persistent = bool(dom.isActive()), bool(dom.isPersistent())
            except libvirt.libvirtError:
                continue
            if not (active and persistent):
                continue
            live = [d.readonly for d in disks if d.domain == name and d.live]
            config = [d.readonly for d in disks if d.domain == name and not d.live]
            self._ok(live == config, f"{where} in {name}: live {live} vs persistent {config} "
                                     "(readonly flags): a half attachment")

    def _check_qemu(self, where: str, vid: str, disks: list[SeenDisk],
                    multiattach: bool) -> None:
        for d in disks:
            if not d.live:
                continue
            try:
                info = block_info(self.conn.lookupByName(d.domain), f"ua-{vid}")
            except libvirt.libvirtError:
                continue  # the guest went away meanwhile (fault tests)
            self._ok(info.ro == d.readonly,
                     f"{where} in {d.domain}: QEMU ro={info.ro}, XML readonly={d.readonly}")
            if multiattach:
                self._ok(info.direct, f"{where} in {d.domain}: QEMU does not use O_DIRECT")
