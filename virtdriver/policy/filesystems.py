"""Who may write a shared volume, by what it holds: one writer unless a cluster filesystem.

Two guests that mount one ext4, xfs or btrfs read-write each replay and write their own
journal over the other's: the commonest way a multiattach volume loses its data. A cluster
filesystem (gfs2, ocfs2) coordinates its writers; raw or unknown data, LVM, RAID members and
encrypted containers leave coordination to what runs on top (a clustered database, a cluster
volume manager). So a second writer is refused where the volume holds a filesystem that is not
a cluster one, unless the caller overrides it; a reader beside one writer is allowed, with a
warning that says what it will see. Whichever attaches first, the outcome is the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from virtdriver.errors import SharedWriteRefused

CLUSTER_FILESYSTEMS: Final = ("gfs2", "ocfs2")
OVERRIDE: Final = "--allow-shared-write"


@dataclass(frozen=True)
class Signature:
    """One signature blkid found: its type (ext4, gfs2, LVM2_member, ...) and its usage."""

    type: str
    usage: str  # filesystem, raid, crypto, other
    where: str = ""  # "" for the whole volume, else "partition N"


def unshareable(signatures: Sequence[Signature]) -> list[str]:
    """The filesystems in ``signatures`` not built for shared block access (``ext4``, ...)."""
    return [f"{s.type} ({s.where})" if s.where else s.type for s in signatures
            if s.usage == "filesystem" and s.type not in CLUSTER_FILESYSTEMS]


def check_writers(volume: str, filesystems: Sequence[str], writers: Sequence[str],
                  readers: Sequence[str], joining: Sequence[str], *,
                  allow_shared_write: bool) -> str | None:
    """Refuse a second writer of ``filesystems``; else what to warn of, if anything.

    ``writers`` and ``readers`` are every guest that will use the volume once ``joining`` (the
    guests being attached) have it; :class:`SharedWriteRefused` when a joining guest makes two
    writers and ``allow_shared_write`` is not given.
    """
    if not filesystems or not writers or not joining:
        return None
    held = " and ".join(filesystems)
    if len(writers) > 1:
        if not allow_shared_write:
            raise SharedWriteRefused(
                f"volume {volume} holds {held}, which is not a cluster filesystem: "
                f"{', '.join(writers)} would all write it, each over the others' journal; "
                f"attach read-only, use gfs2 or ocfs2, or override with {OVERRIDE}")
        return (f"volume {volume} holds {held}, which is not a cluster filesystem, and "
                f"{', '.join(writers)} write it ({OVERRIDE}): only the guests can keep it intact")
    if readers:
        return (f"volume {volume} holds {held}, which is not a cluster filesystem: "
                f"{', '.join(readers)} read{'s' if len(readers) == 1 else ''} it while "
                f"{writers[0]} writes, and see{'s' if len(readers) == 1 else ''} its files as "
                "they were at mount, with stale or torn metadata after that")
    return None
