"""The rules of live migration: which disks may move, and who counts as a user meanwhile.

A guest that is being migrated is on two hosts at once, as far as its volumes are concerned:
the destination connected them before the guest arrives, the source still has them until the
guest has left. Two rules follow, and both are here:

- a guest *arriving* (prepared on the destination, not there yet) uses its volumes on the
  destination like a guest that is there: another attach is refused or allowed by the sharing
  rules as if it were, and a detach of a neighbour does not tear its connection down;
- a guest may leave only with disks that another host can run safely: a shared disk must not be
  cached on the source's host (the destination would start from stale pages) -- libvirt refuses
  that too, in words an operator cannot act on. The destination refuses to render such a disk
  as well (:func:`refuse_cached_arrival`). Each disk must arrive as it left
  (:mod:`virtdriver.policy.carryover`).

An arrival note stops counting once its guest is seen on the destination, and is removed then:
a guest that arrived and left again is not expected any more. When libvirt's migration call
returns, the outcome follows where the guest is (:func:`guest_location`), never the call's result
alone: an interrupt or a lost host can come at any moment.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from virtdriver.errors import MigrationRefused, show
from virtdriver.policy.identity import names_guest
from virtdriver.policy.sharing import DIRECT_CACHE_MODES, Use

ARRIVING = " (arriving by live migration)"  # how an arriving guest is named among users


@dataclass(frozen=True)
class Arrival:
    """A guest expected on this host by live migration, and its disk of one volume."""

    guest: str  # the instance as the caller named it (name or UUID)
    volume: str
    data: tuple[str, ...] | None
    shareable: bool
    readonly: bool
    token: str | None = None  # tells this note from a later one of the same guest
    shared_write: str | None = None  # what the override let it write here beside others

    def as_use(self) -> Use:
        """The arriving guest's disk, as the sharing rules see it (it will be live here)."""
        return Use(guest=f"{self.guest}{ARRIVING}", guest_uuid=self.guest,
                   volume=self.volume, data=self.data, shareable=self.shareable,
                   readonly=self.readonly, cache="none")

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"guest": self.guest, "volume": self.volume,
                                 "data": list(self.data) if self.data is not None else None,
                                 "shareable": self.shareable, "readonly": self.readonly,
                                 "token": self.token}
        if self.shared_write is not None:
            found["shared_write"] = self.shared_write
        return found

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Arrival:
        data = raw.get("data")
        fields = (raw.get("guest"), raw.get("volume"))
        token, override = raw.get("token"), raw.get("shared_write")
        if not all(isinstance(f, str) for f in fields) or not (
                data is None or (isinstance(data, list) and all(isinstance(d, str) for d in data))
        ) or not all(f is None or isinstance(f, str) for f in (token, override)):
            raise ValueError(f"{show(raw)} is not an arriving guest")
        return cls(str(raw["guest"]), str(raw["volume"]),
                   tuple(data) if data is not None else None,
                   raw.get("shareable") is True, raw.get("readonly") is True, token,
                   override)

    def is_guest(self, name: str, uuid: str) -> bool:
        return names_guest(name, uuid, self.guest)


def still_arriving(arrivals: Iterable[Arrival],
                   present: Sequence[tuple[str, str]]) -> list[Arrival]:
    """The arrivals whose guest is not on this host yet: once it is there, its own disks count
    (an arrival left behind after that says nothing any more)."""
    return [a for a in arrivals if not any(a.is_guest(name, uuid) for name, uuid in present)]


def refuse_leaving(guest: str, disks: Sequence[Use]) -> None:
    """Refuse to migrate ``guest`` when one of its volumes would be unsafe on another host.

    ``disks`` are the guest's own disks. A disk another guest may write (``<shareable/>``) must
    not be cached on this host: the guest would leave dirty pages behind, and the destination
    would read what the neighbours wrote through a cache of its own.
    """
    for use in disks:
        if use.shareable and use.cache not in DIRECT_CACHE_MODES:
            raise MigrationRefused(
                f"guest {guest} cannot be migrated: its disk {use.device or '?'} (volume "
                f"{use.volume or 'not attached by virtdriver'}) is shared with cache="
                f"{use.cache or 'default'}; a shared disk must use cache='none' (detach and "
                "attach it again with virtdriver, which renders it so)")


def refuse_cached_arrival(guest: str, volume: str, device: str | None, shareable: bool,
                          cache: str | None) -> None:
    """Refuse to render a disk for the destination that would arrive shared but cached there.

    The destination's own check of :func:`refuse_leaving`'s rule: a compute service that drives
    the steps itself (prepare, render, its own ``migrate3``) never runs the source's check.
    """
    if shareable and cache not in DIRECT_CACHE_MODES:
        raise MigrationRefused(
            f"guest {guest} cannot arrive: its disk {device or '?'} (volume {volume}) is shared "
            f"with cache={cache or 'default'}; a shared disk must use cache='none' (on the "
            "source, detach and attach it again with virtdriver, which renders it so); "
            "nothing was moved")


def refuse_unprepared(guest: str, volumes: Iterable[str], prepared: Iterable[str]) -> None:
    """Every volume the guest takes along must have been prepared on the destination."""
    missing = sorted(set(volumes) - set(prepared))
    if missing:
        raise MigrationRefused(
            f"guest {guest} cannot be migrated: volume{'s' if len(missing) > 1 else ''} "
            f"{', '.join(missing)} {'were' if len(missing) > 1 else 'was'} not prepared on the "
            "destination (prepare_incoming / 'virtdriver migrate-prepare' first)")


def refuse_arriving_over(guest: str, running: bool) -> None:
    """A guest cannot arrive where a guest of its name or UUID is already defined."""
    if running:
        raise MigrationRefused(f"guest {guest} already runs on this host; it cannot arrive by "
                               "migration")
    raise MigrationRefused(f"an inactive definition of guest {guest} is left on this host (a "
                           "leftover: it does not run here); remove it ('virsh undefine') before "
                           "the guest arrives by migration")


def refuse_finish(guest: str, running: bool, defined: bool, leftover_definition: bool) -> None:
    """The source may release a guest's volumes only once the guest has left it.

    Not while it runs here, and not while it is merely shut off here (unless its definition is
    known to be a leftover of a migration that moved it)."""
    if running:
        raise MigrationRefused(f"guest {guest} still runs on this host: the migration has not "
                               "finished, so its volumes stay connected")
    if defined and not leftover_definition:
        raise MigrationRefused(
            f"guest {guest} is shut off on this host and has not left it: its volumes stay "
            "connected for its next start; if it left by live migration and only its definition "
            "stayed here, finish with --leftover-definition")


MOVED, STAYED, UNKNOWN = "moved", "stayed", "unknown"


def guest_location(libvirt_succeeded: bool, on_source: bool | None,
                   on_destination: bool | None) -> str:
    """Where the guest is once libvirt's migration call has returned (or failed).

    ``on_source`` / ``on_destination``: whether it runs there, ``None`` when that host could not
    be asked. :data:`MOVED` completes the migration on both hosts, :data:`STAYED` undoes the
    destination's preparation, :data:`UNKNOWN` leaves both hosts as they are for an operator.
    """
    if libvirt_succeeded:
        return MOVED
    if on_source:
        return STAYED
    if on_destination:
        return MOVED
    return UNKNOWN
