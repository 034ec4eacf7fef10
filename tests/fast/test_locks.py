"""The per-volume and per-guest locks and the guest's attach generation (plain files)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from virtdriver.hypervisor.locks import GuestFile, guest_lock, lock_is_free


def guest_generation(lock_dir: Path, guest: str) -> int:
    """The generation as an attach reads it before taking the guest's lock."""
    opened = GuestFile(lock_dir, guest)
    opened.close()
    return opened.generation


BUMP = """
import sys
from pathlib import Path
from virtdriver.hypervisor.locks import guest_lock
with guest_lock(Path(sys.argv[1]), sys.argv[2]) as held:
    held.changed()
"""


def test_the_generation_starts_at_zero_and_rises_with_each_change(tmp_path: Path) -> None:
    guest = "0b7d1e52-7f2a-4a51-9a64-1f0e3c2b9d10"
    assert guest_generation(tmp_path, guest) == 0
    with guest_lock(tmp_path, guest) as held:
        assert held.generation == 0
        held.changed()
        held.changed()
        assert guest_generation(tmp_path, guest) == 2  # readable without the lock
    with guest_lock(tmp_path, guest) as held:
        assert held.generation == 2


def test_another_process_sees_the_change_and_the_lock_is_free_after(tmp_path: Path) -> None:
    guest = "5a1c9e7e-2d7b-4f0c-8a0e-6c2f1d9b3a47"
    before = guest_generation(tmp_path, guest)
    subprocess.run([sys.executable, "-c", BUMP, str(tmp_path), guest], check=True, timeout=60)
    assert guest_generation(tmp_path, guest) == before + 1
    assert lock_is_free(tmp_path, f"guest-{guest}")


def test_a_held_guest_lock_is_seen_as_held(tmp_path: Path) -> None:
    guest = "9f3e2d1c-0b4a-4c8d-9e7f-a1b2c3d4e5f6"
    with guest_lock(tmp_path, guest):
        assert not lock_is_free(tmp_path, f"guest-{guest}")
    assert lock_is_free(tmp_path, f"guest-{guest}")
