"""What every step of the driver shares: the libvirt connection, reading the host's guests, the
host side of a volume (os-brick, secrets, records) and the locks.

Whether a volume is still used on this host is always answered from libvirt's live state and the
sharing rules (:func:`virtdriver.policy.sharing.still_used`), under the volume's and its data's
locks; the records only say *how* to release what an attach set up.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import libvirt

from virtdriver.driver.batches import Batches
from virtdriver.driver.options import HostOptions
from virtdriver.errors import (
    DamagedRecord,
    HostConnectFailed,
    HypervisorError,
    LockTimeout,
    VirtDriverError,
)
from virtdriver.hypervisor.connection import Connection, libvirt_message
from virtdriver.hypervisor.dataid import DataIdentity, identity_token
from virtdriver.hypervisor.domains import (
    DomainState,
    DomainsView,
    DomainXml,
    ListedDomain,
    read_domains,
)
from virtdriver.hypervisor.locks import HeldLocks, locks
from virtdriver.hypervisor.sharedread import SharedRead
from virtdriver.hypervisor.volume_users import VERBATIM_TEXT
from virtdriver.policy.sharing import Use, still_used

if TYPE_CHECKING:  # the render path is imported by the operations that render
    from virtdriver.driver.request import VolumeRequest
    from virtdriver.hypervisor.hostconn import HostConnections, HostRecord
    from virtdriver.policy.migration import Arrival

LOG = logging.getLogger("virtdriver.driver")
PATHS_LOG = logging.getLogger("virtdriver.paths")  # said on the CLI's terminal too


class ComputeHost:
    """One libvirt host as the driver's steps use it."""

    def __init__(self, uri: str, options: HostOptions) -> None:
        self.options = options
        self.connection = Connection(uri)
        self._records: HostConnections | None = None
        self._host_read = SharedRead(self.view)
        # attaches of one volume waiting for its lock together (see driver.attach_batch)
        self.attach_batches: Batches[Any, Any] = Batches()

    @property
    def records(self) -> HostConnections:
        """The host-connection records (imported and opened when first needed: a command that
        only reads one guest does not pay for os-brick's setup code at start)."""
        if self._records is None:
            from virtdriver.hypervisor.hostconn import HostConnections

            self._records = HostConnections(self.options.state_dir)
        return self._records

    # ---- locks ----------------------------------------------------------------------------------

    def lock(self, volumes: list[str], data: list[tuple[str, str]], operation: str) -> HeldLocks:
        """The volumes' and their data's locks (see :mod:`virtdriver.hypervisor.locks`)."""
        return locks(self.options.lock_dir, volumes, data, operation=operation,
                     timeout=self.options.lock_timeout,
                     notice_after=self.options.lock_notice_after)

    @contextlib.contextmanager
    def data_locked(self, identity: DataIdentity | None, described: str,
                    operation: str) -> Iterator[None]:
        """The lock of one piece of data found only after the volume lock was taken."""
        if identity is None:
            yield
            return
        with self.lock([], [(identity_token(identity), described)], operation):
            yield

    # ---- rendering for this host ----------------------------------------------------------------

    def security_models(self) -> tuple[str, ...]:
        return self.connection.security_models()

    def render_kwargs(self) -> dict[str, Any]:
        """The host options :func:`virtdriver.render.build_disk` takes, with this libvirt's
        security drivers when a label policy writes per-disk labels (``auto`` writes none, and
        then costs no capabilities read)."""
        kwargs = self.options.render_kwargs()
        if self.options.label_policy != "auto":
            kwargs["security_models"] = self.security_models()
        return kwargs

    def check_label_policy(self) -> None:
        """Refuse, before anything changes, a label policy this host's security drivers cannot
        apply (see :func:`virtdriver.policy.check_label_policy`)."""
        if self.options.label_policy != "auto":
            from virtdriver.policy import check_label_policy

            check_label_policy(self.options.label_policy, self.security_models())

    def after_readonly_hotplug(self, dom: libvirt.virDomain, name: str, uuid: str) -> None:
        """On an AppArmor host, take back the writable profile rule libvirt's hot-plug gave a
        read-only disk (see :mod:`virtdriver.hypervisor.apparmor`); a failure is a warning."""
        if "apparmor" not in self.security_models():
            return
        try:
            xml = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_SECURE)
        except libvirt.libvirtError as exc:
            LOG.warning("guest %s: cannot read its XML to narrow its AppArmor profile: %s", name,
                        libvirt_message(exc))
            return
        from virtdriver.hypervisor import apparmor

        problem = apparmor.regenerate_profile(uuid, xml)
        if problem:
            LOG.warning("guest %s: its AppArmor profile still lets QEMU open the read-only disk "
                        "for writing (libvirt's hot-plug rule): %s", name, problem)

    # ---- reading the host -----------------------------------------------------------------------

    def view(self, read: Sequence[ListedDomain | DomainXml] | None = None, *,
             arriving: bool = True, skip: str | None = None) -> DomainsView:
        """Every guest on this host, read from libvirt now (parsed only where asked), and (with
        ``arriving``) the guests expected here by live migration. ``read``: the domains, if the
        caller listed (or read) them already; ``skip``: a guest (UUID) left out."""
        try:
            if read is None:
                read = [d for d in self.connection.list_domains() if d.uuid != skip]
            domains = read_domains(d for d in read if isinstance(d, ListedDomain))
        except libvirt.libvirtError as exc:
            raise HypervisorError("cannot read the host's guests", libvirt_message(exc)) from None
        domains += [d for d in read if isinstance(d, DomainXml)]
        view = DomainsView(domains)
        if not arriving:
            return view
        uses, records = self._arriving(view.present())
        return DomainsView(domains, uses, records)

    def shared_view(self, not_before: int) -> tuple[int, DomainsView]:
        """:meth:`view` of every guest, begun at or after ``not_before`` (``monotonic_ns``), and
        when it began; concurrent callers (an attach storm) share one read (see
        :mod:`virtdriver.hypervisor.sharedread`)."""
        return self._host_read.get(not_before)

    def states(self, mentioning: str | None = None) -> list[DomainState]:
        """Every guest on this host, parsed (see :meth:`DomainXml.state` for ``mentioning``)."""
        view = self.view(arriving=False)
        if mentioning is None:
            return view.states()
        return [d.state(mentioning) for d in view.domains]

    def uses(self) -> list[Use]:
        """Every disk of every guest on this host, as the sharing rules see it, and the disks of
        guests expected here by live migration."""
        states = self.states()
        return [use for state in states for use in state.uses()] + self.arriving(
            [(state.name, state.uuid) for state in states])

    def users(self, volume: str | None, data: DataIdentity | None) -> list[Use]:
        """The disks on this host that are ``volume`` or hold ``data`` (live or defined, read
        from libvirt now), and those of guests expected here by live migration. Only guests
        whose XML can hold one are parsed."""
        return self.view().uses(volume, data)

    def arriving(self, present: list[tuple[str, str]]) -> list[Use]:
        """The disks of guests prepared here for live migration that have not arrived yet.

        A guest seen here has arrived: its note is removed (when its volume's lock is free), so
        that it never counts again once the guest has left."""
        return self._arriving(present)[0]

    def _arriving(self, present: list[tuple[str, str]]
                  ) -> tuple[list[Use], frozenset[str] | None]:
        """:meth:`arriving`, and the records' file names as listed to find the notes."""
        from virtdriver.policy.migration import still_arriving

        arrivals, records = self.records.arrivals_listed()
        waiting = still_arriving(arrivals, present)
        arrived = [a for a in arrivals if a not in waiting and a.token is not None]
        for vid in sorted({a.volume for a in arrived}):
            try:
                with locks(self.options.lock_dir, [vid], [], operation="note an arrival",
                           timeout=0):
                    self.forget_arrived(vid, tokens={a.token for a in arrived}, timeout=0)
            except (LockTimeout, VirtDriverError) as exc:  # busy: its holder settles it
                LOG.debug("arrival notes of volume %s left for later: %s", vid, exc)
        return [a.as_use() for a in waiting], records

    def forget_arrived(self, vid: str, *, guest: DomainState | str | None = None,
                       tokens: set[str | None] | None = None,
                       timeout: float | None = None) -> list[Arrival]:
        """:meth:`forget_arrivals` of a guest that has arrived, under its notes' data locks too.

        A read of the host that listed the guests before the guest arrived and reads the notes
        after they are gone sees neither; the data lock's release, stamped after the removal,
        tells an attach holding that lock to read again (:func:`virtdriver.driver.attach.
        read_from`). ``timeout``: for the data locks (default the host's lock timeout).
        """
        from virtdriver.policy.migration import Arrival

        record = self.records.load(vid)
        notes = [Arrival.from_json(raw) for raw in record.arriving] if record else []
        data = sorted({n.data for n in notes if n.data is not None
                       and _matches(n, guest, tokens)})
        with locks(self.options.lock_dir, [], [(identity_token(d), f"volume {vid}")
                                               for d in data],
                   operation="forget an arrival", notice_after=self.options.lock_notice_after,
                   timeout=self.options.lock_timeout if timeout is None else timeout):
            return self.forget_arrivals(vid, guest=guest, tokens=tokens)

    def forget_arrivals(self, vid: str, *, guest: DomainState | str | None = None,
                        tokens: set[str | None] | None = None) -> list[Arrival]:
        """Remove the volume's arrival notes of ``guest`` (a guest here, or the instance as
        prepared) or with one of ``tokens``; the caller holds the volume's lock."""
        record = self.records.load(vid)
        if record is None or not record.arriving:
            return []
        from virtdriver.policy.migration import Arrival

        notes = [Arrival.from_json(raw) for raw in record.arriving]
        gone = [n for n in notes if _matches(n, guest, tokens)]
        if gone:
            record.arriving = [n.to_json() for n in notes if not _matches(n, guest, tokens)]
            self.records.save(vid, record)
        return gone

    def state(self, dom: libvirt.virDomain) -> DomainState:
        try:
            return DomainState.read(dom)
        except libvirt.libvirtError as exc:
            raise HypervisorError(f"cannot read guest {dom.name()}",
                                  libvirt_message(exc)) from None

    def find(self, instance: str) -> DomainState:
        return self.state(self.connection.domain(instance))

    # ---- the host side of a volume --------------------------------------------------------------

    def connect(self, request: VolumeRequest, record: HostRecord | None = None) -> None:
        """Set up what the host needs for the volume: os-brick's connection (filling in
        ``device_path``) and the libvirt secrets the protocol declares. ``record``: the
        volume's record as :meth:`check_record` read it under the same volume lock (else it is
        read again)."""
        options = request.options
        if request.protocol is not None:
            self._check_connectable(request)
            device_info = self.records.connect(request.vid, request.protocol,
                                               self._brick_properties(request), record=record,
                                               **self._connector_options(request))
            if device_info.get("path"):
                request.data["device_path"] = device_info["path"]
        for secret in request.driver.host_secrets(request.data, options):
            self.records.add_secret(self.connection.get(), request.vid, secret)

    def _check_connectable(self, request: VolumeRequest) -> None:
        """Refuse at once what os-brick would fail slowly or silently: too old, no multipathd.

        os-brick older than 6.10 ignores ``enforce_multipath`` at connect, and every release
        connects a single path without a word when multipathd is missing: virtdriver checks.
        """
        from virtdriver.volume import probes

        driver = request.driver
        brick = probes.os_brick_version() if driver.min_os_brick else None
        if brick is not None and probes.version_tuple(brick) < driver.min_os_brick:
            floor = ".".join(map(str, driver.min_os_brick))
            raise HostConnectFailed(f"volume {request.vid}: os-brick {brick} cannot connect "
                                    f"{driver.volume_type} volumes here; {floor} or later can")
        if not self.options.use_multipath or not driver.multipathd:
            return
        if probes.running("multipathd") is not None:
            return
        if self.options.enforce_multipath:
            raise HostConnectFailed(f"volume {request.vid}: multipathd is not running, and "
                                    "enforce_multipath refuses a single-path attach")
        PATHS_LOG.warning("volume %s: multipathd is not running: connected over one path only",
                          request.vid)

    def _connector_options(self, request: VolumeRequest) -> dict[str, Any]:
        """os-brick connector settings for the volume: the protocol's, and multipath when the
        host uses it (recorded with the connection, so the release uses the same connector)."""
        extra = request.driver.connector_options(request.options)
        if self.options.use_multipath:
            extra["use_multipath"] = True
        return extra

    def extend_connector_options(self, request: VolumeRequest) -> dict[str, Any]:
        """The connector a rescan must use: the one the volume was connected with here.

        That is its record's (with multipath, os-brick then grows the map too, not only its
        paths), else the one a connect would use now, also when the record is damaged: a rescan
        changes nothing the record describes, and the release that needs it names the damage.
        """
        try:
            record = self.records.load(request.vid)
        except DamagedRecord:
            record = None
        if record is not None and record.protocol == request.protocol:
            return dict(record.connector_options)
        return self._connector_options(request)

    def _brick_properties(self, request: VolumeRequest) -> dict[str, Any]:
        properties = dict(request.data)
        if self.options.enforce_multipath:
            properties["enforce_multipath"] = True  # os-brick: fail without multipathd
        return properties

    def check_record(self, vid: str, view: DomainsView | None = None) -> HostRecord:
        """The volume's record, or a new one; a damaged record stops the call at once.

        A damaged record (:class:`~virtdriver.errors.StateError`) could not say how to undo what
        the call would set up, so nothing changes. ``view``: the host as read under the volume's
        lock held since; when its listing of the records has no file of the volume, there is
        none (only that lock's holder makes one).
        """
        from virtdriver.hypervisor.hostconn import HostRecord

        if view is not None and view.records is not None \
                and self.records.path(vid).name not in view.records:
            return HostRecord()
        return self.records.load(vid) or HostRecord()

    def release(self, vid: str, properties: dict[str, Any] | None = None) -> bool:
        """Release the volume's host side (the caller checked that nobody uses it)."""
        return self.records.release(vid, self.connection.get(), self._mount_in_use, properties)

    def release_unless_used(self, vid: str, data: DataIdentity | None,
                            properties: dict[str, Any] | None = None, *,
                            gone: str | None = None, view: DomainsView | None = None) -> list[str]:
        """Release the host side when no guest uses the volume or its data any more; returns the
        guests that still do (and then releases nothing). ``gone`` is a guest (UUID) whose
        leftover definition does not count: it left this host by live migration. ``view``: the
        host as read under the caller's locks (else it is read now)."""
        uses = (view or self.view()).uses(vid, data)
        users = still_used(vid, data, [u for u in uses if u.guest_uuid != gone])
        if not users:
            self.release(vid, properties)
        return users

    def drop_after_failure(self, request: VolumeRequest, used_before: list[Use]) -> None:
        """After a failed attach: release what the attach connected, unless it was there before
        (another guest used the volume) or belongs to another volume's attachment of the data."""
        if any(u.volume == request.vid for u in used_before):
            return
        try:
            if used_before:  # the same data under another id: its device is not ours to tear down
                self.records.forget(request.vid)
            elif not self.release(request.vid) and request.protocol is not None:
                # os-brick failed part way (an NVMe controller connected, its namespace never
                # found; an iSCSI login without its LUN): nothing was recorded, and nobody else
                # on this host uses the volume or its data, so undo whatever it left.
                self.records.undo_failed_connect(request.protocol,
                                                 self._brick_properties(request),
                                                 **self._connector_options(request))
        except VirtDriverError as exc:
            LOG.error("could not release the host connection of volume %s: %s", request.vid, exc)

    def _mount_in_use(self, mount_point: str) -> bool:
        prefix = mount_point.rstrip("/") + "/"
        return any(u.disk.source is not None and (u.disk.source.file or "").startswith(prefix)
                   for d in self.view(arriving=False).domains
                   if not VERBATIM_TEXT.fullmatch(prefix)
                   or prefix in d.current or prefix in (d.config or "") for u in d.parsed.disks)

    def close(self) -> None:
        self.connection.close()


def _matches(note: Arrival, guest: DomainState | str | None,
             tokens: set[str | None] | None) -> bool:
    """Whether an arrival note is of ``guest`` (a guest here, or the instance as prepared) or
    has one of ``tokens``."""
    if tokens is not None and note.token in tokens:
        return True
    if isinstance(guest, DomainState):
        return note.is_guest(guest.name, guest.uuid)
    return guest is not None and note.is_guest(guest, guest)
