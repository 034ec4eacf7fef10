"""The volume driver a compute service loads: a short façade over the steps.

    from virtdriver import LibvirtVolumeDriver
    driver = LibvirtVolumeDriver("qemu:///system")
    attachment = driver.attach_volume(connection_info, "guest-a", attach_mode="ro")
    driver.detach_volume("guest-a", attachment.volumeId)

Each operation is a module of steps: :mod:`~virtdriver.driver.attach` (one guest or many),
:mod:`~virtdriver.driver.detach` (and releasing a leaked host connection),
:mod:`~virtdriver.driver.swap`, :mod:`~virtdriver.driver.extend`; what they share is
:class:`~virtdriver.driver.compute_host.ComputeHost`, configured by one :class:`HostOptions`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from virtdriver import arguments
from virtdriver.attachment import Attachment
from virtdriver.driver import attach as attach_steps
from virtdriver.driver import attach_batch
from virtdriver.driver import detach as detach_steps
from virtdriver.driver import extend as extend_steps
from virtdriver.driver import migrate as migrate_steps
from virtdriver.driver import swap as swap_steps
from virtdriver.driver.compute_host import ComputeHost
from virtdriver.driver.options import DEFAULT_STATE_DIR, HostOptions, check_timeout
from virtdriver.errors import InvalidRenderOption, InvalidRequest, show
from virtdriver.hypervisor.domains import DiskUse
from virtdriver.policy import check_attach_mode
from virtdriver.policy.identity import check_instance, check_requested_volume_id
from virtdriver.shapes import normalize

if TYPE_CHECKING:
    from virtdriver.driver.interrupts import Interrupts


__all__ = ["DEFAULT_STATE_DIR", "Attachment", "HostOptions", "LibvirtVolumeDriver"]


class LibvirtVolumeDriver:
    """Attach and detach volumes on one libvirt host, multiattach-safe.

    ``state_dir`` holds the per-volume locks and the host-connection records;
    ``mount_base`` is where shares (NFS, GlusterFS, ...) are mounted. The keyword options are
    those of :class:`HostOptions` (or pass ``options=`` directly).
    """

    def __init__(self, uri: str = "qemu:///system", *, options: HostOptions | None = None,
                 state_dir: str | Path = DEFAULT_STATE_DIR, **host_options: Any) -> None:
        arguments.text(uri, "uri")
        arguments.instance_of(options, HostOptions, "options", "a HostOptions", optional=True)
        arguments.path(state_dir, "state_dir")
        known = {f.name for f in fields(HostOptions)} - {"state_dir"}
        unknown = sorted(set(host_options) - known)
        if unknown:
            raise InvalidRequest(f"{unknown[0]}: not a host option (known: "
                                 f"{', '.join(sorted(known))})")
        self.options = options or HostOptions(state_dir=Path(state_dir), **host_options)
        self.uri = uri
        self.compute_host = ComputeHost(uri, self.options)

    # Attributes older callers read.
    state_dir = property(lambda self: self.options.state_dir)
    lock_dir = property(lambda self: self.options.lock_dir)
    mount_base = property(lambda self: self.options.mount_base)
    detach_timeout = property(lambda self: self.options.detach_timeout)
    connection = property(lambda self: self.compute_host.connection)
    records = property(lambda self: self.compute_host.records)  # the host-connection records

    def prepare_host(self) -> None:
        """Make the mount base a shared mount point now (a compute service calls this when it
        starts, before it starts guests). Attaching a share does it too, but a guest started
        before that cannot see shares mounted later and is refused until it restarts."""
        from virtdriver.hypervisor.mounts import ensure_shared

        ensure_shared(str(self.options.mount_base), self.options.lock_dir)

    # ---- queries ----------------------------------------------------------------------------

    def list_attachments(self, instance: str) -> list[Attachment]:
        """The volumes attached to a guest (live state for a running guest)."""
        check_instance(instance)
        found: dict[str, Attachment] = {}
        for use in self.compute_host.find(instance).disks:
            att = Attachment.from_use(use)
            if att is not None and att.volumeId not in found:
                found[att.volumeId] = att
        return list(found.values())

    def volume_users(self, volume: str) -> list[DiskUse]:
        """Every disk on this host that is ``volume`` (a volume id)."""
        check_requested_volume_id(volume, "volume")
        from virtdriver.hypervisor.volume_users import Wanted

        wanted = Wanted(volume, None)  # only guests whose XML can hold the volume are parsed
        return [u for d in self.compute_host.view(arriving=False).domains if d.may_use(wanted)
                for u in d.parsed.disks if u.volume == volume]

    def connector_properties(self, attach_mode: str = "rw", *, my_ip: str = "127.0.0.1",
                             multipath: bool | None = None) -> dict[str, Any]:
        """os-brick's host connector properties plus ``mode``, for the storage service
        (``multipath`` defaults to the host's ``use_multipath``)."""
        mode = check_attach_mode(attach_mode)
        arguments.text(my_ip, "my_ip")
        from virtdriver.volume.hostname import host_problem

        problem = host_problem(my_ip)  # the rule every host field of connection_info follows
        if problem is not None:
            raise InvalidRenderOption(f"my_ip: {show(my_ip)} {problem}")
        use = self.options.use_multipath if multipath is None else multipath
        arguments.flag(use, "multipath")
        from virtdriver.hypervisor import brick

        props = brick.connector_properties(self.options.state_dir, my_ip=my_ip, multipath=use)
        props["mode"] = mode
        return props

    def capabilities(self) -> dict[str, Any]:
        """What this host supports, read from the running libvirt and QEMU."""
        from virtdriver.hypervisor.capabilities import host_capabilities

        return host_capabilities(self.compute_host.connection.get())

    # ---- operations -------------------------------------------------------------------------

    def attach_volume(self, connection_info: Mapping[str, Any], instance: str, *,
                      attach_mode: str | None = None, target_dev: str | None = None,
                      bus: str | None = None, device: str = "disk",
                      luks_secret_uuid: str | None = None, cache: str | None = None,
                      error_policy: str | None = None, rerror_policy: str | None = None,
                      allow_shared_write: bool = False,
                      writers_elsewhere: Sequence[str] = ()) -> Attachment:
        """Connect the host side, render, and attach to the guest (live and persistent).

        Anything that fails is undone, the host connect included unless another local guest
        still uses the volume. ``connection_info`` may be any shape Cinder or nova sends
        (:func:`virtdriver.shapes.normalize`); ``attach_mode`` ``None`` is an attachment
        record's own mode, else ``rw``. ``cache`` (``none``/``directsync``) and the error
        policies are this attachment's; ``allow_shared_write`` lets a second guest write a
        filesystem that is not a cluster one (:mod:`virtdriver.policy.filesystems`).
        ``writers_elsewhere`` names the volume's writers on other hosts (e.g. from Cinder's
        attachments): they count as writers, which this host's guests alone do not show.
        """
        arguments.mapping(connection_info, "connection_info")
        check_instance(instance)
        arguments.flag(allow_shared_write, "allow_shared_write")
        elsewhere = arguments.texts(writers_elsewhere, "writers_elsewhere")
        connection_info, attach_mode = normalize(connection_info, attach_mode)
        placement = attach_steps.Placement(attach_mode, target_dev, bus, device, luks_secret_uuid,
                                           cache, error_policy, rerror_policy)
        return attach_batch.attach_one(self.compute_host, connection_info, instance, placement,
                                       allow_shared_write=allow_shared_write,
                                       writers_elsewhere=elsewhere)

    def attach_volume_to_many(self, connection_info: Mapping[str, Any],
                              instances: Sequence[str], *,
                              attach_mode: str | Mapping[str, str] | None = None,
                              progress: Callable[[str, Attachment | Exception], None]
                              | None = None, max_parallel: int = 16, cache: str | None = None,
                              error_policy: str | None = None, rerror_policy: str | None = None,
                              allow_shared_write: bool = False) -> list[Attachment]:
        """Attach one multiattach volume to many guests: one host connect, parallel attaches.

        All or nothing: if any guest fails, the attachments already made are undone, the host
        side is released, and :class:`~virtdriver.errors.AttachFailed` names the guest that
        failed and why. ``attach_mode`` is one mode for all, or a mapping of instance to mode.
        ``progress`` hears of each guest once the outcome of the whole call is known. ``cache``,
        the error policies and ``allow_shared_write`` are as for :meth:`attach_volume`.
        """
        arguments.mapping(connection_info, "connection_info")
        instances = [check_instance(i, f"instances[{n}]")
                     for n, i in enumerate(arguments.sequence(instances, "instances",
                                                              lambda v, _: v))]
        arguments.function(progress, "progress", optional=True)
        arguments.whole(max_parallel, "max_parallel", minimum=1)
        if attach_mode is not None and not isinstance(attach_mode, (str, Mapping)):
            check_attach_mode(attach_mode)
        modes = {}
        for i in instances:
            mode = attach_mode.get(i) if isinstance(attach_mode, Mapping) else attach_mode
            if mode is not None:
                check_attach_mode(mode, f"attach_mode[{i}]" if isinstance(attach_mode, Mapping)
                                  else "attach_mode")
            modes[i] = normalize(connection_info, mode)[1]
        arguments.flag(allow_shared_write, "allow_shared_write")
        placements = [attach_steps.Placement(modes[i], cache=cache, error_policy=error_policy,
                                             rerror_policy=rerror_policy) for i in instances]
        return attach_steps.attach(self.compute_host, connection_info, instances, placements,
                                   progress=progress, max_parallel=max_parallel,
                                   allow_shared_write=allow_shared_write)

    def detach_volume(self, instance: str, volume_id: str, *, timeout: float | None = None,
                      connection_info: Mapping[str, Any] | None = None) -> None:
        """Detach one attachment; disconnect the host side when no local guest still uses it.

        Waits for libvirt's device-removed event (``timeout`` seconds, default the driver's
        ``detach_timeout``); :class:`~virtdriver.errors.DetachTimeout` leaves it in place.
        """
        check_instance(instance)
        check_requested_volume_id(volume_id)
        if connection_info is not None:
            arguments.mapping(connection_info, "connection_info")
        wait = self.options.detach_timeout if timeout is None else check_timeout(timeout,
                                                                                 "timeout")
        detach_steps.detach(self.compute_host, instance, volume_id, wait, connection_info)

    def release_volume(self, volume_id: str) -> bool:
        """Release a volume's recorded host connection that no guest on this host uses (after a
        guest vanished behind the driver's back); ``False`` when nothing was recorded."""
        check_requested_volume_id(volume_id)
        return detach_steps.release(self.compute_host, volume_id)

    def release_orphans(self) -> list[tuple[str, str | None]]:
        """Remove host connections no record and no guest accounts for (iSCSI sessions, NVMe-oF
        controllers, mapped RBD images, mounts in the mount base) that nothing holds.

        Returns each orphan's description with ``None`` when released, else why it was kept
        (a holder, a mount, a process with its device open); see :mod:`virtdriver.ops.orphans`.
        A release that fails keeps that orphan and the sweep goes on; it then raises
        :class:`~virtdriver.errors.OrphansNotReleased`, whose ``outcome`` is the same list.
        """
        from virtdriver.ops.orphans import sweep

        options = self.options
        return [(orphan.describe(), reason) for orphan, reason in sweep(
            self.compute_host.connection.get(), options.state_dir, str(options.mount_base),
            options.lock_timeout)]

    def swap_volume(self, instance: str, old_connection_info: Mapping[str, Any],
                    new_connection_info: Mapping[str, Any], *,
                    timeout: float | None = None,
                    progress: Callable[[int, int], None] | None = None) -> Attachment:
        """Move a guest's disk from one volume to another, keeping device and attach mode.

        Refused when the old volume is attached read-write to another guest on this host (that
        guest's writes would not follow the copy); a failed swap leaves the guest as it was.
        ``timeout`` bounds the copy of a running guest's disk (default ``detach_timeout``);
        ``progress(copied, total)`` hears how far it is, in bytes, a few times a second, and
        whatever it raises cancels the copy (the guest keeps the old volume).
        """
        check_instance(instance)
        arguments.mapping(old_connection_info, "old_connection_info")
        arguments.mapping(new_connection_info, "new_connection_info")
        wait = self.options.detach_timeout if timeout is None else check_timeout(timeout,
                                                                                 "timeout")
        return swap_steps.swap(self.compute_host, instance, old_connection_info,
                               new_connection_info, wait, progress)

    def extend_volume(self, instance: str, connection_info: Mapping[str, Any],
                      new_size: int) -> int:
        """Grow an attached volume for one guest (read-only attachments too); returns the size
        its QEMU now shows, in bytes. :class:`~virtdriver.errors.ExtendIncomplete` when it
        could not be shown the new size."""
        check_instance(instance)
        arguments.mapping(connection_info, "connection_info")
        arguments.whole(new_size, "new_size", minimum=1)
        return extend_steps.extend_one(self.compute_host, instance, connection_info, new_size)

    def extend_volume_on_host(self, connection_info: Mapping[str, Any], *,
                              new_size: int | None = None,
                              instance: str | None = None) -> extend_steps.ExtendResult:
        """Grow a volume for every guest on this host that uses it (or only ``instance``), after
        refreshing the host side once; ``new_size`` defaults to the size the host then sees.
        The result tells per guest what its QEMU shows (``result.complete``: all of them the
        new size) and, for any left behind, why and the command that fixes it."""
        arguments.mapping(connection_info, "connection_info")
        if new_size is not None:
            arguments.whole(new_size, "new_size", minimum=1)
        if instance is not None:
            check_instance(instance)
        return extend_steps.extend(self.compute_host, connection_info, new_size, instance)

    # ---- live migration (see virtdriver.driver.migrate) -------------------------------------

    def prepare_incoming(self, connection_info: Mapping[str, Any], instance: str,
                         attach_mode: str | None = None, *,
                         allow_shared_write: bool = False) -> None:
        """On the destination: connect the volume for ``instance`` before it arrives by live
        migration; it counts as a user of the volume here from now on. ``attach_mode``
        ``None``: an attachment record's own, else ``rw``. Refused as an attach of the guest
        would be (``allow_shared_write`` as for :meth:`attach_volume`)."""
        arguments.mapping(connection_info, "connection_info")
        check_instance(instance)
        arguments.flag(allow_shared_write, "allow_shared_write")
        connection_info, attach_mode = normalize(connection_info, attach_mode)
        migrate_steps.prepare_incoming(self.compute_host, connection_info, instance, attach_mode,
                                       allow_shared_write=allow_shared_write)

    def incoming_xml(self, domain_xml: str, connection_infos: Sequence[Mapping[str, Any]], *,
                     live: bool = True) -> str:
        """On the destination: the guest's domain XML with its volumes rendered for this host;
        ``live`` for ``VIR_MIGRATE_PARAM_DEST_XML`` (a link's device), ``False`` for
        ``VIR_MIGRATE_PARAM_PERSIST_XML`` (the link)."""
        if not isinstance(domain_xml, (str, bytes, bytearray)):
            arguments.text(domain_xml, "domain_xml")
        arguments.mappings(connection_infos, "connection_infos")
        arguments.flag(live, "live")
        return migrate_steps.incoming_xml(self.compute_host, domain_xml, connection_infos,
                                          live=live)

    def abort_incoming(self, instance: str, volume_id: str) -> bool:
        """On the destination, after a failed migration: undo :meth:`prepare_incoming`."""
        check_instance(instance)
        check_requested_volume_id(volume_id)
        return migrate_steps.abort_incoming(self.compute_host, instance, volume_id)

    def complete_incoming(self, instance: str, volume_id: str) -> bool:
        """On the destination, once ``instance`` arrived (a migration the caller drove): forget
        its arrival, so that it never counts as a user here again once it has left."""
        check_instance(instance)
        check_requested_volume_id(volume_id)
        return migrate_steps.complete_incoming(self.compute_host, instance, volume_id)

    def finish_outgoing(self, instance: str, volume_id: str, *,
                        leftover_definition: bool = False) -> list[str]:
        """On the source, once ``instance`` left: release the volume's host side unless another
        guest here uses it; returns the guests that still do. A guest shut off here has not
        left, unless ``leftover_definition`` says only its definition stayed behind."""
        check_instance(instance)
        check_requested_volume_id(volume_id)
        arguments.flag(leftover_definition, "leftover_definition")
        return migrate_steps.finish_outgoing(self.compute_host, instance, volume_id,
                                             leftover_definition=leftover_definition)

    def migrate(self, instance: str, destination: LibvirtVolumeDriver,
                connection_infos: Sequence[Mapping[str, Any]], *,
                uri: str | None = None, peer_to_peer: bool = False,
                interrupts: Interrupts | None = None,
                progress: Callable[[int, int], None] | None = None,
                allow_shared_write: bool = False) -> list[str]:
        """Live-migrate ``instance`` and its volumes to ``destination`` (all the steps around
        libvirt's migration); returns the volumes this host keeps connected for other guests.
        ``progress(processed, total)`` hears how far it is, in bytes; whatever it raises aborts
        the migration (undone on both hosts as any failed one). ``allow_shared_write``: the
        destination's preparation may give a second writer a filesystem that is not a cluster
        one (as for :meth:`attach_volume`). See :func:`virtdriver.driver.migrate.migrate` and
        docs/migration.md."""
        check_instance(instance)
        arguments.instance_of(destination, LibvirtVolumeDriver, "destination",
                              "a LibvirtVolumeDriver")
        arguments.mappings(connection_infos, "connection_infos")
        arguments.text(uri, "uri", optional=True)
        arguments.flag(peer_to_peer, "peer_to_peer")
        arguments.function(progress, "progress", optional=True)
        arguments.flag(allow_shared_write, "allow_shared_write")
        return migrate_steps.migrate(self.compute_host, destination.compute_host, instance,
                                     connection_infos, uri=uri, peer_to_peer=peer_to_peer,
                                     interrupts=interrupts, progress=progress,
                                     allow_shared_write=allow_shared_write)

    def close(self) -> None:
        self.compute_host.close()
