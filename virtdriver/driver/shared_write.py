"""The attach's shared-write step: what the volume holds, before a second writer or a reader.

Run after the host connect and before the first guest gets the disk. The rule is
:mod:`virtdriver.policy.filesystems`; the volume is read with blkid
(:mod:`virtdriver.hypervisor.signatures`); an override is noted in the guest's metadata for
``audit`` (:mod:`virtdriver.hypervisor.metadata`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import libvirt

from virtdriver.driver.request import VolumeRequest
from virtdriver.errors import VirtDriverError
from virtdriver.hypervisor.connection import libvirt_message
from virtdriver.hypervisor.domains import DomainState, ListedDomain, source_token
from virtdriver.hypervisor.metadata import Override, note_shared_write
from virtdriver.hypervisor.signatures import UnreadableVolume, read_signatures
from virtdriver.policy.filesystems import (
    UNDECIDED,
    Signature,
    check_writers,
    undecided,
    unshareable,
)
from virtdriver.policy.sharing import Use

LOG = logging.getLogger("virtdriver.sharing")  # said on the CLI's terminal too


def check(request: VolumeRequest, guests: Sequence[str], modes: Sequence[str],
          used_before: Sequence[Use], allow_shared_write: bool,
          elsewhere: Sequence[str] = ()) -> str | None:
    """Refuse a joining second writer of a filesystem that is not a cluster one, of swap, or
    of data the probe could not decide; warn of a reader beside writers. ``guests`` join with
    ``modes``; ``used_before``: the volume's other users here; ``elsewhere``: its writers on
    other hosts, as the caller knows them (Cinder's attachments). Returns what a granted
    override lets several guests write."""
    joining = {g: "ro" if request.mode == "ro" else m for g, m in zip(guests, modes)}
    writers = sorted({u.guest for u in used_before if not u.readonly}
                     | {name for name, mode in joining.items() if mode == "rw"}
                     | set(elsewhere))
    readers = sorted(({u.guest for u in used_before} | set(joining)) - set(writers))
    if not writers or len(writers) + len(readers) < 2:
        return None
    try:
        source = request.driver.source(request.data, request.options).source
    except VirtDriverError:
        source = None
    path = (source.dev or source.file) if source is not None else None
    if path is None:
        LOG.warning("volume %s is shared with a writer%s, and what it holds is not checked: "
                    "QEMU opens it over the network itself, which this host cannot read",
                    request.vid, f" ({', '.join(elsewhere)})" if elsewhere else "")
        return None
    try:
        signatures = read_signatures(path)
    except UnreadableVolume as exc:
        signatures = [Signature(f"{path} could not be read: {exc}", UNDECIDED)]
    filesystems = unshareable(signatures)
    warning = check_writers(request.vid, filesystems, writers, readers, list(joining),
                            allow_shared_write=allow_shared_write,
                            unknown=undecided(signatures))
    if warning:
        LOG.warning("%s", warning)
    overridden = len(writers) > 1 and any(joining[g] == "rw" for g in joining)
    if not (warning and overridden):
        return None
    return " and ".join(filesystems) or "undecided"


def note(listed: ListedDomain, alias: str, filesystem: str | None) -> None:
    """Note a writer's override in its guest's metadata (live and defined), for ``audit``, keyed
    to the disk just attached (its volume, source and live index); ``None`` drops a note left
    under ``alias`` by an earlier attachment."""
    try:
        live = config = None
        if filesystem is not None:
            live, config = _keyed(listed, alias, filesystem)
        note_shared_write(listed.dom, alias, live, live=listed.active,
                          persistent=listed.persistent, config_note=config)
    except libvirt.libvirtError as exc:
        LOG.warning("guest %s: the --allow-shared-write override could not be noted in its "
                    "metadata: %s", listed.name, libvirt_message(exc))


def _keyed(listed: ListedDomain, alias: str, filesystem: str) -> tuple[Override, Override]:
    """The notes for the disk ``alias`` as libvirt reports it now: live, and defined."""
    found = {use.live: use for use in listed.read().parsed.disks if use.device_alias == alias}
    notes = []
    for live in (True, False):
        use = found.get(live) or found.get(not live)
        if use is None:
            notes.append(Override(filesystem))
            continue
        source = use.disk.source
        notes.append(Override(filesystem, use.volume or "", source_token(use.disk),
                              source.index if live and source is not None else None))
    return notes[0], notes[1]


def key_arrived(state: DomainState, volume: str) -> None:
    """Key the override note of a guest's live disk of ``volume`` that arrived by migration to
    that disk as it runs here: its source and the index libvirt gave it (the arrival's note has
    none)."""
    for use in state.disks:
        alias, source = use.device_alias, use.disk.source
        if not (use.live and use.volume == volume and use.shared_write and alias):
            continue
        note = Override(use.shared_write, volume, source_token(use.disk),
                        source.index if source is not None else None)
        try:
            note_shared_write(state.dom, alias, note, live=True, persistent=False)
        except libvirt.libvirtError as exc:
            LOG.warning("guest %s: its --allow-shared-write note of volume %s could not be keyed "
                        "to the disk it arrived with: %s", state.name, volume,
                        libvirt_message(exc))
