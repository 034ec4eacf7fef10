"""``virtdriver audit``: every volume on this host, who uses it, and what is dangerous about it.

Everything is read from libvirt's live state (every domain, running or defined) and from the
host-connection records under ``<state_dir>/connections``. Disks are grouped into volumes by
their ``ua-<volume id>`` alias, and also by the data behind them (the same device, file or network
volume), so a disk attached behind virtdriver's back to the same data joins that volume; disks
without our alias are reported only when two guests share their data.

Dangers:

- ``unshared``: several guests use the volume and an attachment lacks ``<shareable/>`` (its QEMU
  does not expect other writers; block devices and network disks are not even locked);
- ``cache``: several guests use the volume and an attachment caches it on the host
  (not ``cache='none'``/``'directsync'``), so it reads stale data or writes late;
- ``format``: a shareable read-write disk that is not raw (qcow2 metadata written by two QEMUs
  corrupts the image);
- ``labels``: the per-disk security labels differ between the guests, so relabelling for one
  can cut off the other;
- ``link``: a volume's recorded device path (os-brick's by-path link) now leads to another
  device than the one a running guest holds: the link moved;
- ``leak``: a recorded host connection that no guest uses any more;
- ``startup``: a guest's definition carries a per-disk label for a security driver this host's
  libvirt does not run, so the guest will not start again (``virtdriver repair-labels``);
- ``profile``: on an AppArmor host, a read-only attachment whose guest's profile lets its QEMU
  open the volume for writing (libvirt's hot-plug rule; see
  :mod:`virtdriver.hypervisor.apparmor`);
- ``fence``: two guests pass SCSI reservations (``device='lun'``) to the volume under one
  initiator identity, so a reservation by one does not fence the other;
- ``orphan``: a host connection (an iSCSI session, an NVMe-oF controller, a mapped RBD image, a
  mount in the mount base) that no record and no guest accounts for (see
  :mod:`virtdriver.ops.orphans`);
- ``filesystem``: several guests write the volume, and it holds a filesystem that is not a
  cluster one or a swap area, or what it holds could not be decided (read on this host with
  blkid: the guard refuses a second writer of each), whether they got there by
  ``--allow-shared-write`` (said) or behind virtdriver's back.

Each ``device='lun'`` attachment also says how its guest's reservations reach the target and as
which initiator (``reservations``; see :mod:`virtdriver.policy.reservations`): libvirt exposes
that, not the registrations the target holds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Final

import libvirt

from virtdriver.attachment import describe_source
from virtdriver.errors import DamagedRecord, HypervisorError, StateError
from virtdriver.formatting import table_lines
from virtdriver.hypervisor.apparmor import writable_readonly_disks
from virtdriver.hypervisor.connection import libvirt_message, security_models
from virtdriver.hypervisor.dataid import path_identity
from virtdriver.hypervisor.domains import DiskUse, DomainState, host_state, labels_of
from virtdriver.hypervisor.hostconn import HostConnections
from virtdriver.hypervisor.seclabels import foreign_labels
from virtdriver.hypervisor.signatures import UnreadableVolume, read_signatures
from virtdriver.ops.orphans import check_mount_base, find_orphans
from virtdriver.policy.filesystems import OVERRIDE, UNDECIDED, Signature, shared_write_harm
from virtdriver.policy.migration import still_arriving
from virtdriver.policy.reservations import fence_message, reservation_route, shared_identities
from virtdriver.policy.sharing import Danger, Use, dangers

DANGER_KINDS: Final = ("unshared", "cache", "format", "labels", "identity", "link", "leak",
                       "record", "startup", "profile", "cinder", "fence", "filesystem", "orphan")


@dataclass(frozen=True)
class AuditAttachment:
    """One guest's view of a volume; ``state`` says whether it is live, in the definition, or
    both (the two are listed separately when they differ)."""

    guest: str
    guest_uuid: str
    device: str
    mode: str
    shareable: bool
    cache: str | None
    format: str | None
    labels: tuple[str, ...]
    alias: str | None
    source: str
    state: str
    reservations: str = ""  # device='lun': how its SCSI reservations reach the target, as whom


@dataclass
class VolumeAudit:
    volume: str  # the volume id, or "-" for data shared without our alias
    source: str
    attachments: list[AuditAttachment]
    dangers: list[Danger]
    host_connection: bool

    @property
    def guests(self) -> list[str]:
        return sorted({a.guest for a in self.attachments})


@dataclass
class AuditReport:
    uri: str
    state_dir: str
    volumes: list[VolumeAudit]

    @property
    def dangers(self) -> list[tuple[VolumeAudit, Danger]]:
        return [(v, d) for v in self.volumes for d in v.dangers]

    def volume(self, volume_id: str) -> VolumeAudit | None:
        return next((v for v in self.volumes if v.volume == volume_id), None)

    def to_json(self) -> dict[str, Any]:
        return {"uri": self.uri, "state_dir": self.state_dir,
                "danger": bool(self.dangers),
                "volumes": [asdict(v) | {"guests": v.guests} for v in self.volumes]}


def audit_host(conn: libvirt.virConnect, state_dir: str | Path,
               mount_base: str | None = None) -> AuditReport:
    """Read every domain and the host-connection records; return the volumes and dangers.

    ``mount_base``: where virtdriver mounts shares (default ``<state_dir>/mnt``), whose mounts
    no record or guest accounts for are orphans, as the kernel's other host connections are.
    """
    mount_base = check_mount_base(mount_base or str(Path(state_dir) / "mnt"))
    try:
        states = host_state(conn)
    except libvirt.libvirtError as exc:
        raise HypervisorError("cannot read the host's guests", libvirt_message(exc)) from None
    connections = HostConnections(Path(state_dir))
    recorded, damaged = connections.scan()
    groups = group_disks(states)
    volumes = [_audit_group(group, recorded) for group in groups]
    for volume, group in zip(volumes, groups):
        volume.dangers += _moved_links(group, connections)
    volumes = [v for v in volumes if v.volume != "-" or len(v.guests) > 1 or v.dangers]
    used = {vid for group in groups for u in group if (vid := u.volume)}
    present = [(s.name, s.uuid) for s in states]
    used |= {a.volume for a in still_arriving(connections.arrivals(), present)}  # live migration
    for vid in recorded:
        if vid not in used:
            volumes.append(VolumeAudit(vid, _recorded_device(connections.path(vid)),
                                       [], [_leak(vid, connections.path(vid))], True))
    for path in damaged:
        volumes.append(VolumeAudit(path.stem, str(path), [], [Danger("record", (
            f"the host-connection record {path} is unreadable or damaged, so virtdriver cannot "
            f"tell what to release for that volume: {DamagedRecord.NEXT_STEP}"))], True))
    found, _ = find_orphans(states, connections, mount_base)
    volumes += [VolumeAudit("-", orphan.describe(), [], [Danger("orphan", (
        "no host-connection record and no guest on this host accounts for it: 'virtdriver "
        "release --orphans' removes it unless something holds it"))], False)
        for orphan in found]
    _add_startup_dangers(conn, volumes)
    volumes.sort(key=lambda v: (not v.dangers, v.volume == "-", v.volume, v.source))
    return AuditReport(conn.getURI(), str(state_dir), volumes)


def _add_profile_dangers(volumes: list[VolumeAudit]) -> None:
    for volume in volumes:
        for att in volume.attachments:
            if att.mode != "ro" or att.state == "config" or not att.source.startswith("/"):
                continue
            if writable_readonly_disks(att.guest_uuid, [att.source]):
                volume.dangers.append(Danger("profile", (
                    f"guest {att.guest} has {att.source} read-only, but its AppArmor profile "
                    f"lets its QEMU open it for writing (libvirt gives every hot-plugged disk "
                    f"'rwk'); a detach or restart of the guest, or an attach through virtdriver, "
                    f"regenerates the profile with 'rk'")))


def _add_startup_dangers(conn: libvirt.virConnect, volumes: list[VolumeAudit]) -> None:
    """Guests that will not start again: labels of a security driver libvirt does not run."""
    try:
        models = security_models(conn.getCapabilities())
    except libvirt.libvirtError as exc:
        raise HypervisorError("cannot read libvirt's host capabilities",
                              libvirt_message(exc)) from None
    if "apparmor" in models:
        _add_profile_dangers(volumes)
    for found in foreign_labels(conn, models):
        danger = Danger("startup", found.message(models))
        volume = next((v for v in volumes for a in v.attachments
                       if a.guest_uuid == found.guest_uuid and a.device == found.device
                       and a.state != "live"), None)
        if volume is not None:
            volume.dangers.append(danger)
        else:
            volumes.append(VolumeAudit("-", f"guest {found.guest}, disk {found.device}", [],
                                       [danger], False))


# ---- grouping -----------------------------------------------------------------------------------


def volume_id_of(use: DiskUse) -> str | None:
    return use.volume


def group_disks(states: Iterable[DomainState]) -> list[list[DiskUse]]:
    """Disks that are one volume: the same ``ua-`` volume id, or the same data behind them."""
    parent: dict[object, object] = {}

    def find(token: object) -> object:
        parent.setdefault(token, token)
        while parent[token] != token:
            parent[token] = parent[parent[token]]
            token = parent[token]
        return token

    def union(a: object, b: object) -> None:
        parent[find(a)] = find(b)

    uses: list[tuple[DiskUse, object]] = []
    for state in states:
        for use in state.disks:
            vid = volume_id_of(use)
            tokens: list[object] = [("volume", vid)] if vid is not None else []
            key = use.data
            if key is not None:
                tokens.append(key)
            if not tokens:
                continue
            for token in tokens[1:]:
                union(tokens[0], token)
            uses.append((use, tokens[0]))
    groups: dict[object, list[DiskUse]] = {}
    for use, first in uses:
        groups.setdefault(find(first), []).append(use)
    return list(groups.values())


def attachment_of(use: DiskUse) -> AuditAttachment:
    disk = use.disk
    driver = disk.driver
    return AuditAttachment(
        guest=use.domain_name, guest_uuid=use.domain_uuid,
        device=(disk.target.dev or "") if disk.target else "",
        mode="ro" if disk.readonly else "rw", shareable=disk.shareable,
        cache=driver.cache if driver else None, format=driver.type if driver else None,
        labels=labels_of(disk), alias=use.device_alias, source=describe_source(disk),
        state="live" if use.live else "config",
        reservations=route[0] if (route := reservation_route(disk, use.domain_uuid)) else "")


def merge_views(attachments: list[AuditAttachment]) -> list[AuditAttachment]:
    """One row per guest and disk when its live and persistent views agree."""
    merged: dict[AuditAttachment, AuditAttachment] = {}
    for att in attachments:
        key = replace(att, state="")
        seen = merged.get(key)
        merged[key] = att if seen is None else replace(att, state="live+config")
    return list(merged.values())


# ---- dangers ------------------------------------------------------------------------------------


def _audit_group(group: list[DiskUse], recorded: list[str]) -> VolumeAudit:
    attachments = merge_views([attachment_of(u) for u in group])
    attachments.sort(key=lambda a: (a.guest, a.device, a.state))
    ids = sorted({vid for u in group if (vid := u.volume) is not None})
    volume = ", ".join(ids) or "-"
    sources = sorted({a.source for a in attachments if a.source})
    return VolumeAudit(volume, ", ".join(sources), attachments,
                       dangers([u.as_use() for u in group]) + _fence_dangers(group)
                       + _filesystem_dangers(group), any(v in recorded for v in ids))


def _filesystem_dangers(group: list[DiskUse]) -> list[Danger]:
    """Several guests write data that holds a filesystem not built for it (read with blkid)."""
    writers = sorted({u.domain_name for u in group if not u.disk.readonly})
    paths = sorted({p for u in group if u.disk.source is not None
                    and (p := u.disk.source.dev or u.disk.source.file)})
    if len(writers) < 2 or not paths:
        return []
    try:
        signatures = read_signatures(paths[0])
    except UnreadableVolume as exc:  # a probe that cannot decide is a danger, as in the guard
        signatures = [Signature(f"{paths[0]} could not be read: {exc}", UNDECIDED)]
    harm = shared_write_harm(signatures)
    if not harm:
        return []
    chosen = sorted({u.domain_name for u in group if u.shared_write})
    how = (f" ({', '.join(chosen)} by {OVERRIDE})" if chosen
           else " (not by virtdriver's override)")
    return [Danger("filesystem", f"written by {', '.join(writers)}{how}, but {harm}")]


def _moved_links(group: list[DiskUse], connections: HostConnections) -> list[Danger]:
    """A volume's recorded device path that now leads to another device than the one a running
    guest holds (a by-path link an iSCSI re-login or a rescan repointed)."""
    found = []
    for vid in sorted({vid for u in group if (vid := u.volume) is not None}):
        try:
            record = connections.load(vid)
        except StateError:
            continue  # a damaged record is a danger of its own
        path = record.device_info.get("path") if record is not None else None
        if not isinstance(path, str) or not path.startswith("/"):
            continue
        now = path_identity(path)
        held = sorted({(u.domain_name, u.disk.source.dev) for u in group
                       if u.volume == vid and u.live and u.disk.type == "block"
                       and u.disk.source is not None and u.disk.source.dev and u.data != now})
        if held:
            guests = ", ".join(f"{guest} holds {dev}" for guest, dev in held)
            found.append(Danger("link", (
                f"{guests}, but the volume's device path {path} now leads to "
                f"{os.path.realpath(path)}: the link moved, so another attach or a restart of "
                "the guest gets that device; find which device is the volume before attaching "
                "or detaching it again")))
    return found


def _fence_dangers(group: list[DiskUse]) -> list[Danger]:
    """Guests of this host that reach the volume's reservations as one initiator (live disks:
    a definition's disk reaches nothing until its guest runs)."""
    routes = [(u.domain_name, route) for u in group
              if u.live and (route := reservation_route(u.disk, u.domain_uuid)) is not None]
    return [Danger("fence", fence_message(guests, identity))
            for identity, guests in sorted(shared_identities(routes).items(), key=str)]


def dangers_of(attachments: list[AuditAttachment]) -> list[Danger]:
    """What is unsafe about these attachments of one volume (the sharing rules' verdict)."""
    return dangers([Use(guest=a.guest, guest_uuid=a.guest_uuid, volume=None, data=None,
                        shareable=a.shareable, readonly=a.mode == "ro", cache=a.cache,
                        format=a.format, labels=a.labels, device=a.device)
                    for a in attachments])


def _leak(vid: str, record: Path) -> Danger:
    return Danger("leak", (
        f"the host is still connected (record {record}) but no guest uses the volume: nothing "
        f"will disconnect it; release it with 'virtdriver release {vid}'"))


def _recorded_device(record: Path) -> str:
    """What a host-connection record says was set up: protocol and device, mount, secrets."""
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return ""
    if not isinstance(data, dict):
        return ""
    info = data.get("device_info")
    path = info.get("path") if isinstance(info, dict) else None
    parts = [" ".join(str(p) for p in (data.get("protocol"), path) if p)]
    if data.get("mount_point"):
        parts.append(f"mounted at {data['mount_point']}")
    if data.get("secrets"):
        parts.append(f"{len(data['secrets'])} libvirt secret(s)")
    return ", ".join(p for p in parts if p)


# ---- output -------------------------------------------------------------------------------------

ATTACHMENT_COLUMNS: Final = [("guest", "Guest"), ("device", "Device"), ("mode", "Mode"),
                             ("shareable", "Shareable"), ("cache", "Cache"),
                             ("format", "Format"), ("labels", "Labels"), ("state", "State")]


def format_report(report: AuditReport) -> str:
    lines: list[str] = []
    for vol in report.volumes:
        title = (f"Volume {vol.volume}" if vol.volume != "-"
                 else "Host connection without a record or a guest"
                 if vol.dangers and all(d.kind == "orphan" for d in vol.dangers)
                 else "Shared data without a volume id")
        extra = [vol.source] if vol.source else []
        if vol.host_connection:
            extra.append("host connection recorded")
        lines.append(f"{title}" + (f"  ({'; '.join(extra)})" if extra else ""))
        if vol.attachments:
            rows = [asdict(a) | {"labels": " ".join(a.labels) or "-",
                                             "cache": a.cache or "default",
                                             "format": a.format or "-",
                                             "shareable": "yes" if a.shareable else "no"}
                    for a in vol.attachments]
            lines += ["  " + ln for ln in table_lines(rows, ATTACHMENT_COLUMNS)]
            lines += [f"  reservations: {a.guest} ({a.device}): {a.reservations}"
                      for a in vol.attachments if a.reservations]
        else:
            lines.append("  (no guest uses it)")
        lines += [f"  DANGER {d.kind}: {d.message}" for d in vol.dangers]
        lines.append("")
    count = len(report.dangers)
    lines.append(f"{len(report.volumes)} volume{'s' if len(report.volumes) != 1 else ''} "
                 f"checked: " + (f"{count} danger{'s' if count != 1 else ''} found."
                                 if count else "no danger found."))
    return "\n".join(lines)
