"""Live migration as steps on the two hosts, with the safety of attach and detach.

The steps of each host are in :mod:`~virtdriver.driver.migrate_dest` (prepare, render, complete,
abort) and :mod:`~virtdriver.driver.migrate_source` (finish). :func:`migrate` drives all of them
around libvirt's ``migrate3``:

1. under the source's locks of every volume of the guest and of the guest itself (a detach or an
   attach of that guest waits until the migration has ended), it checks the guest may leave and
   that each disk would arrive as it left -- before anything moves;
2. prepares each volume on the destination and renders the guest's XML for it;
3. runs libvirt's migration in a worker thread while interrupts are held back (an interrupt asks
   libvirt to cancel the job);
4. settles by where the guest is (:func:`virtdriver.policy.migration.guest_location`): moved --
   the source releases what no other guest uses, the destination forgets the arrival; stayed --
   the destination's preparation is undone; unknown -- both are left for an operator, told what
   to run on which host.
"""

from __future__ import annotations

import logging
import shlex
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import libvirt
from lxml import etree

from virtdriver.config import Disk
from virtdriver.config.reader import parse_xml
from virtdriver.driver import shared_write
from virtdriver.driver.compute_host import ComputeHost
from virtdriver.driver.interrupts import SIGNALS, Interrupted, Interrupts
from virtdriver.driver.migrate_dest import (
    abort_incoming,
    arriving_disk,
    complete_incoming,
    incoming_xml,
    prepare_incoming,
    volume_disks,
)
from virtdriver.driver.migrate_source import finish_locked, finish_outgoing, leaving_volumes
from virtdriver.driver.request import VolumeRequest
from virtdriver.errors import (
    HypervisorError,
    InvalidRequest,
    MigrationFailed,
    MigrationRefused,
    VirtDriverError,
)
from virtdriver.hypervisor.connection import libvirt_message
from virtdriver.hypervisor.domains import DomainState
from virtdriver.hypervisor.jobwatch import released_after_switchover, watching
from virtdriver.hypervisor.locks import guest_lock
from virtdriver.hypervisor.metadata import overrides_in, set_overrides_in
from virtdriver.policy.migration import MOVED, STAYED, guest_location, refuse_unprepared

__all__ = ["abort_incoming", "complete_incoming", "finish_outgoing", "incoming_xml", "migrate",
           "prepare_incoming"]
LOG = logging.getLogger("virtdriver.driver")
XML_FLAGS = libvirt.VIR_DOMAIN_XML_MIGRATABLE | libvirt.VIR_DOMAIN_XML_SECURE


def migrate(source: ComputeHost, destination: ComputeHost, instance: str,
            connection_infos: Sequence[Mapping[str, Any]], *, uri: str | None = None,
            flags: int = 0, peer_to_peer: bool = False,
            interrupts: Interrupts | None = None,
            progress: Callable[[int, int], None] | None = None,
            allow_shared_write: bool = False) -> list[str]:
    """Live-migrate ``instance`` from ``source`` to ``destination`` with its volumes.

    ``connection_infos`` are the volumes' connection info *for the destination*. Returns the
    volumes whose host side the source kept (another guest there still uses them). When the
    guest stays on the source (refused, libvirt failed, interrupted), the destination released
    what was prepared -- or the error says which host still holds it and what to run there.
    ``peer_to_peer``: the source's libvirtd drives the migration itself (it opens the
    destination's URI). ``interrupts``: the caller's, to learn whether a signal came.
    ``allow_shared_write``: the override of the destination's shared-write guard
    (:func:`~virtdriver.driver.migrate_dest.prepare_incoming`).
    """
    if source.options.lock_dir.resolve() == destination.options.lock_dir.resolve():
        raise InvalidRequest("the destination's state directory is the source's: each host "
                             "keeps its own locks and records")
    dom = source.connection.domain(instance)
    signals = interrupts or Interrupts()
    with signals:
        state = source.state(dom)
        with _Locked(source, dom, state) as state:
            return _migrate_locked(source, destination, dom, state, connection_infos,
                                   uri, flags, peer_to_peer, signals, progress,
                                   allow_shared_write)


class _Locked:
    """The source's locks of every volume of the guest, then of the guest itself; the guest
    is read again under them (and the volumes locked again if that read found others)."""

    def __init__(self, host: ComputeHost, dom: libvirt.virDomain, state: DomainState) -> None:
        self.compute_host, self.dom, self.state = host, dom, state
        self.stack: list[Any] = []

    def __enter__(self) -> DomainState:
        for _ in range(3):
            volumes = sorted({u.volume for u in self.state.disks if u.volume})
            held = [self.compute_host.lock(volumes, [], "migrate its guest to another host"),
                    guest_lock(self.compute_host.options.lock_dir, self.state.uuid,
                               timeout=self.compute_host.options.lock_timeout,
                               operation="migrate the guest to another host")]
            try:
                for lock in held:
                    lock.__enter__()
                    self.stack.append(lock)
                self.state = self.compute_host.state(self.dom)
            except BaseException:
                self.__exit__(None, None, None)
                raise
            if {u.volume for u in self.state.disks if u.volume} <= set(volumes):
                return self.state
            self.__exit__(None, None, None)
        raise MigrationFailed(f"the volumes of guest {self.state.name} keep changing; try again")

    def __exit__(self, *exc: Any) -> None:
        while self.stack:
            self.stack.pop().__exit__(None, None, None)


def _migrate_locked(source: ComputeHost, destination: ComputeHost, dom: libvirt.virDomain,
                    state: DomainState, connection_infos: Sequence[Mapping[str, Any]],
                    uri: str | None, flags: int, peer_to_peer: bool,
                    signals: Interrupts,
                    progress: Callable[[int, int], None] | None = None,
                    allow_shared_write: bool = False) -> list[str]:
    if not state.active:
        raise MigrationRefused(f"guest {state.name} is not running; live migration moves running "
                               "guests")
    modes = leaving_volumes(state)
    requests = {VolumeRequest.parse(i, destination.options.render_options()).vid: i
                for i in connection_infos}
    refuse_unprepared(state.name, modes, requests)
    xmls = [_held_overrides_only(xml, state) for xml in _domain_xml(dom, state)]
    _refuse_broken_promises(destination, state, xmls, requests, modes)
    signals.check(f"nothing was moved; guest {state.name} runs on the source as before")
    prepared: list[str] = []
    try:
        for vid, mode in modes.items():
            prepare_incoming(destination, requests[vid], state.uuid, mode,
                             allow_shared_write=allow_shared_write)
            prepared.append(vid)
            signals.check(f"guest {state.name} was not moved")
        params = _params(destination, xmls, requests.values(), uri)
        signals.check(f"guest {state.name} was not moved")
    except BaseException as exc:
        left = _undo(destination, state, prepared)
        if isinstance(exc, Interrupted):
            raise Interrupted(f"{exc}; it still runs on the source{left}") from None
        if left:
            raise MigrationFailed(f"{exc}{left}") from exc
        raise
    flags |= libvirt.VIR_MIGRATE_LIVE
    if state.persistent:
        flags |= libvirt.VIR_MIGRATE_PERSIST_DEST | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE
    # progress(processed, total) hears libvirt's job statistics; what it raises aborts the job.
    # A cancel or failure at the switchover must not leave libvirt's call waiting for ever.
    with watching(dom, progress), released_after_switchover(dom):
        error = _run_libvirt(dom, destination, params, flags, peer_to_peer, signals)
    where = MOVED if error is None else guest_location(False, *_runs_where(dom, destination,
                                                                           state.uuid))
    if where == MOVED:
        if signals.received is not None:
            LOG.warning("the interrupt (%s) came after guest %s had moved: the migration was "
                        "completed", signals.name, state.name)
        return _complete(source, destination, state, modes)
    if where == STAYED:
        left = _undo(destination, state, prepared) or "; the destination was left as it was"
        if signals.received is not None:
            raise Interrupted(f"{signals.name}: the migration was cancelled; guest {state.name} "
                              f"still runs on the source{left}")
        raise MigrationFailed(f"libvirt could not migrate {state.name}: {error}; it still runs "
                              f"on the source{left}")
    raise MigrationFailed(
        f"libvirt could not migrate {state.name} ({error}) and it runs on neither host as far as "
        "libvirt can tell: nothing was released or undone; once you know where it is, if it "
        f"moved run on the source: {_commands(source, 'migrate-finish', state.uuid, list(modes))}"
        f"; if not, run on the destination: "
        f"{_commands(destination, 'migrate-abort', state.uuid, prepared)}")


def _domain_xml(dom: libvirt.virDomain, state: DomainState) -> list[str]:
    """The guest's migratable XML: live, and the definition of a persistent guest."""
    try:
        xmls = [dom.XMLDesc(XML_FLAGS)]
        if state.persistent:
            xmls.append(dom.XMLDesc(XML_FLAGS | libvirt.VIR_DOMAIN_XML_INACTIVE))
    except libvirt.libvirtError as exc:
        raise MigrationFailed(f"cannot read guest {state.name}", libvirt_message(exc)) from None
    return xmls


def _held_overrides_only(xml: str, state: DomainState) -> str:
    """``xml`` without the override notes its running guest's disks do not hold (a disk plugged
    again behind virtdriver's back): the migratable XML has no index to tell them by."""
    held = {use.device_alias for use in state.disks if use.live and use.shared_write}
    root = parse_xml(xml)
    notes = overrides_in(root)
    kept = {alias: note for alias, note in notes.items() if alias in held}
    if kept == notes:
        return xml
    set_overrides_in(root, kept)
    return etree.tostring(root, encoding="unicode")


def _refuse_broken_promises(destination: ComputeHost, state: DomainState, xmls: list[str],
                            requests: Mapping[str, Mapping[str, Any]],
                            modes: Mapping[str, str]) -> None:
    """Each disk rendered as the destination would (not connected yet) must arrive as it left."""
    for xml in xmls:
        for element, vid in volume_disks(parse_xml(xml)):
            if vid not in modes:
                continue
            request = VolumeRequest.parse(requests[vid], destination.options.render_options())
            arriving_disk(destination, request, Disk.from_element(element, strict=False),
                          state.name, modes[vid], connected=False)


def _params(destination: ComputeHost, xmls: list[str], infos: Any,
            uri: str | None) -> dict[str, Any]:
    infos = list(infos)
    params: dict[str, Any] = {libvirt.VIR_MIGRATE_PARAM_DEST_XML:
                              incoming_xml(destination, xmls[0], infos)}
    if len(xmls) > 1:
        persist = incoming_xml(destination, xmls[1], infos, live=False)  # keeps a link
        params[libvirt.VIR_MIGRATE_PARAM_PERSIST_XML] = persist
    if uri:
        params[libvirt.VIR_MIGRATE_PARAM_URI] = uri
    return params


def _run_libvirt(dom: libvirt.virDomain, destination: ComputeHost, params: dict[str, Any],
                 flags: int, peer_to_peer: bool, signals: Interrupts) -> str | None:
    """libvirt's migration in a worker thread, so that an interrupt is answered at once by asking
    libvirt to cancel the job. ``None`` on success, else libvirt's words."""
    outcome: dict[str, str] = {}

    def run() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)  # the main thread answers them
        if signals.received is not None:
            outcome["error"] = f"not started: {signals.name} came first"
            return
        try:
            if peer_to_peer:
                dom.migrateToURI3(destination.connection.uri, params,
                                  flags | libvirt.VIR_MIGRATE_PEER2PEER)
            else:
                dom.migrate3(destination.connection.get(), params, flags)
        except libvirt.libvirtError as exc:
            outcome["error"] = libvirt_message(exc)
        except Exception as exc:  # noqa: BLE001 - reported as the migration's failure
            outcome["error"] = str(exc) or type(exc).__name__

    worker = threading.Thread(target=run, name="virtdriver-migrate3", daemon=True)
    with signals.answering(lambda: _cancel(dom)):
        worker.start()
        while worker.is_alive():
            worker.join(0.2)  # a signal wakes this (main) thread: answered at once
    return outcome.get("error")


def _cancel(dom: libvirt.virDomain) -> None:
    try:
        dom.abortJob()
    except libvirt.libvirtError as exc:  # no job (not started, or over): libvirt's call decides
        LOG.debug("cannot cancel the migration job: %s", libvirt_message(exc))


def _runs_where(dom: libvirt.virDomain, destination: ComputeHost,
                uuid: str) -> tuple[bool | None, bool | None]:
    """Whether the guest runs on the source, on the destination (``None``: cannot tell)."""
    return _asked(dom.isActive), _asked(
        lambda: destination.connection.get().lookupByUUIDString(uuid).isActive())


def _asked(question: Callable[[], int]) -> bool | None:
    try:
        return bool(question())
    except libvirt.libvirtError as exc:
        return False if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN else None
    except HypervisorError:
        return None


def _undo(destination: ComputeHost, state: DomainState, prepared: list[str]) -> str:
    """Undo the destination's preparations; what could not be undone, as the end of a message
    (empty when everything was)."""
    left = []
    for vid in prepared:
        try:
            abort_incoming(destination, state.uuid, vid)
        except VirtDriverError as exc:
            LOG.debug("could not undo the preparation of volume %s: %s", vid, exc)
            left.append(vid)
    if not left:
        return ""
    return (f"; the destination {destination.connection.uri} still holds the preparation of "
            f"volume{'s' if len(left) > 1 else ''} {', '.join(left)}: once it is reachable, run "
            f"there: {_commands(destination, 'migrate-abort', state.uuid, left)}")


def _complete(source: ComputeHost, destination: ComputeHost, state: DomainState,
              modes: Mapping[str, str]) -> list[str]:
    """The guest moved: each volume released on the source unless another guest there uses it
    (its lock is held), the arrival forgotten on the destination. What fails is logged with the
    command that finishes it: the guest has moved, nothing can undo that."""
    kept = []
    for vid in modes:
        try:
            if finish_locked(source, state.uuid, vid):
                kept.append(vid)
        except VirtDriverError as exc:
            LOG.error("guest %s was migrated, but volume %s could not be released on the source "
                      "(%s); run there: %s", state.name, vid, exc,
                      _commands(source, "migrate-finish", state.uuid, [vid]))
        try:
            with destination.lock([vid], [], "complete an incoming migration"):
                _key_arrived(destination, state, vid)
                destination.forget_arrived(vid, guest=state.uuid)
        except VirtDriverError as exc:
            LOG.error("guest %s was migrated, but its arrival note of volume %s stays on the "
                      "destination (%s); run there: %s", state.name, vid, exc,
                      _commands(destination, "migrate-complete", state.uuid, [vid]))
    return kept


def _key_arrived(destination: ComputeHost, state: DomainState, vid: str) -> None:
    """Key the moved guest's override note of ``vid`` to the disk it got on the destination."""
    try:
        arrived = destination.find(state.uuid)
    except VirtDriverError as exc:
        LOG.warning("guest %s was migrated, but its disks on the destination could not be read "
                    "to key its --allow-shared-write note: %s", state.name, exc)
        return
    shared_write.key_arrived(arrived, vid)


def _commands(host: ComputeHost, verb: str, uuid: str, volumes: Sequence[str]) -> str:
    """The exact command lines (shell syntax, ``;`` between them) that do ``verb`` for each
    volume on ``host``."""
    base = (f"virtdriver -c {shlex.quote(host.connection.uri)} --state-dir "
            f"{shlex.quote(str(host.options.state_dir))} {verb} {uuid}")
    return "; ".join(f"{base} {shlex.quote(vid)}" for vid in volumes) or "nothing"
