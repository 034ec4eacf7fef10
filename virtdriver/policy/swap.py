"""What a swap may do: the rules of moving one guest's disk from one volume to another.

A swap is a block copy: every byte of the old volume is written over the whole new volume, then
the guest writes to the new one. So beyond what attach refuses (asked of the new volume with the
same :func:`~virtdriver.policy.sharing.refuse_attach`), a swap is refused when

- the old volume is the new one, or other guests here write to the old one (their writes would
  not follow the copy);
- any guest here uses the new volume or its data, multiattach or not (the copy would overwrite
  what it reads), or the new volume is the old one's data under another id;
- the guest writes to the disk and the new volume is meant read-only (the attachment's
  ``attach_mode`` or ``data.access_mode`` says ``ro``): a swap keeps the attach mode, and it never
  widens a read-only volume to read-write;
- the sizes differ (QEMU copies only onto a volume of the same size).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from virtdriver.errors import SwapRefused, VolumeInUse
from virtdriver.formatting import human
from virtdriver.policy.sharing import Use, users_of


def _guests(uses: Sequence[Use]) -> str:
    return ", ".join(sorted({u.guest for u in uses}))


def refuse_swap(old: str, new: str, guest_uuid: str, guest: str, uses: Sequence[Use]) -> None:
    """Refuse moving ``guest`` from volume ``old`` when that loses data: the same volume, or an
    old volume that other guests on this host write to (their writes would not follow)."""
    if old == new:
        raise SwapRefused(f"volume {old} cannot be swapped with itself")
    writers = [u for u in uses if u.volume == old and u.guest_uuid != guest_uuid
               and not u.readonly]
    if writers:
        raise VolumeInUse(f"volume {old} is shared and attached read-write to "
                          f"{_guests(writers)}; swapping {guest} away from it would "
                          "lose their writes")


def refuse_swap_target(old: str, new: str, data: Hashable | None, guest_uuid: str, guest: str,
                       uses: Sequence[Use]) -> None:
    """Refuse copying onto volume ``new`` (its data ``data``) while any guest here uses it."""
    users = users_of(new, data, uses)
    itself = [u for u in users if u.guest_uuid == guest_uuid and u.volume == old]
    if itself:
        raise VolumeInUse(f"volume {new} is the same data as volume {old}, which {guest} "
                          "uses; a swap would copy the disk onto itself")
    if users:
        raise VolumeInUse(f"volume {new} is attached to {_guests(users)} on this host; a swap "
                          f"copies {guest}'s disk over the whole volume, so it may only go to "
                          "a volume no other guest uses")


def refuse_mode_change(new: str, new_mode: str, readonly: bool, guest: str) -> None:
    """Refuse swapping a read-write disk onto a volume whose attachment says read-only."""
    if new_mode == "ro" and not readonly:
        raise SwapRefused(f"volume {new} is meant read-only (its connection_info says 'ro') "
                          f"and {guest} writes to the disk; a swap keeps the attach mode: "
                          "detach, then attach the volume with --attach-mode ro")


def refuse_size(old: str, old_size: int | None, new: str, new_size: int | None) -> None:
    """Refuse a copy between volumes of different sizes (``None``: not known on the host)."""
    if old_size is not None and new_size is not None and old_size != new_size:
        raise SwapRefused(f"volume {old} is {human(old_size)} ({old_size} bytes) and the new "
                          f"volume {new} {human(new_size)} ({new_size} bytes); QEMU copies only "
                          "onto a volume of the same size")
