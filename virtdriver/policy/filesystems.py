"""Who may write a shared volume, by what it holds: one writer unless a cluster filesystem.

Two guests that mount one ext4, xfs or btrfs read-write each replay and write their own
journal over the other's: the commonest way a multiattach volume loses its data. A cluster
filesystem (gfs2, ocfs2) coordinates its writers; raw or unknown data, LVM, RAID members and
encrypted containers leave coordination to what runs on top (a clustered database, a cluster
volume manager). So a second writer is refused where the volume holds a filesystem that is not
a cluster one, unless the caller overrides it; a reader beside writers is allowed, with a
warning that says what it will see, whoever attached first and whatever the writers chose.

Every signature the probe sees counts, not only the one it would name: a filesystem not built for
shared access or a swap area among them refuses a second writer (two guests swapping on one
device overwrite each other's pages), and so does a probe that cannot decide (signatures that
exclude each other, a timeout, an error), which says why and names the override.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from virtdriver.errors import SharedWriteRefused

CLUSTER_FILESYSTEMS: Final = ("gfs2", "ocfs2")
SWAP: Final = ("swap", "swsuspend")  # a swap area, or one holding a hibernated system's image
PARTITION_TABLE: Final = "partition table"  # a Signature's usage: a table, looked into
UNDECIDED: Final = "undecided"  # a Signature's usage: the probe could not decide; type says why
OVERRIDE: Final = "--allow-shared-write"


@dataclass(frozen=True)
class Signature:
    """One signature blkid found: its type (ext4, gfs2, LVM2_member, ...) and its usage."""

    type: str
    usage: str  # filesystem, raid, crypto, other, partition table, undecided
    where: str = ""  # "" for the whole volume, else "partition N"


def unshareable(signatures: Sequence[Signature]) -> list[str]:
    """What in ``signatures`` two writers corrupt: filesystems not built for shared block access
    (``ext4``, ...) and swap areas, each named once."""
    found = [f"{s.type} ({s.where})" if s.where else s.type for s in signatures
             if (s.usage == "filesystem" and s.type not in CLUSTER_FILESYSTEMS)
             or s.type in SWAP]
    return list(dict.fromkeys(found))


def undecided(signatures: Sequence[Signature]) -> str:
    """Why the probe could not decide what the volume holds ("" when it could)."""
    return "; ".join(dict.fromkeys(f"{s.type} ({s.where})" if s.where else s.type
                                   for s in signatures if s.usage in (UNDECIDED, "unknown")))


def check_writers(volume: str, filesystems: Sequence[str], writers: Sequence[str],
                  readers: Sequence[str], joining: Sequence[str], *,
                  allow_shared_write: bool, unknown: str = "") -> str | None:
    """Refuse a joining second writer of ``filesystems`` (or of data whose probe could not
    decide: ``unknown`` says why); else what to warn of, if anything.

    ``writers`` and ``readers`` are every guest that will use the volume once ``joining`` (the
    guests being attached) have it; :class:`SharedWriteRefused` when a joining guest writes
    beside another writer and ``allow_shared_write`` is not given. A joining reader is never
    refused: it is warned, whatever the writers chose and whoever came first.
    """
    if not (filesystems or unknown) or not writers or not joining:
        return None
    held = (f"holds {' and '.join(filesystems)}, which is not a cluster filesystem"
            if filesystems else f"holds what could not be decided ({unknown})")
    if filesystems and unknown:
        held += f", and {unknown}"
    if len(writers) > 1 and any(g in writers for g in joining):
        if not allow_shared_write:
            raise SharedWriteRefused(
                f"volume {volume} {held}: {', '.join(writers)} would all write it, each over "
                f"the others' writes; attach read-only, use gfs2 or ocfs2, or override with "
                f"{OVERRIDE}")
        return (f"volume {volume} {held}, and {', '.join(writers)} write it ({OVERRIDE}): "
                "only the guests can keep it intact")
    if readers:
        one = len(readers) == 1
        return (f"volume {volume} {held}: {', '.join(readers)} read{'s' if one else ''} it "
                f"while {', '.join(writers)} write{'s' if len(writers) == 1 else ''}, and "
                f"see{'s' if one else ''} its files as they were at mount, with stale or torn "
                "metadata after that")
    return None


def shared_write_harm(signatures: Sequence[Signature]) -> str:
    """What several writers do to a volume holding ``signatures``, for ``audit`` ("" when it is
    safe for them: a cluster filesystem, raw or unknown data)."""
    filesystems = unshareable([s for s in signatures if s.type not in SWAP])
    swaps = unshareable([s for s in signatures if s.type in SWAP])
    unknown = undecided(signatures)
    said = []
    if filesystems:
        said.append(f"it holds {' and '.join(filesystems)}, which is not a cluster filesystem: "
                    "each guest's journal overwrites the others'")
    if swaps:
        said.append(f"it holds a swap area ({' and '.join(swaps)}): each guest swaps its pages "
                    "out over the pages the others swapped out there")
    if unknown:
        said.append(f"what it holds could not be decided ({unknown}), and the filesystem guard "
                    f"refuses a second writer of such a volume without {OVERRIDE}: find out "
                    "what it holds before another guest writes it")
    return "; and ".join(said)
