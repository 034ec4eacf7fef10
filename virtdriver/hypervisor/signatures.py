"""What a volume holds, read on this host with blkid's low-level probe (libblkid).

``blkid --probe`` reads the signatures in the device or file itself, never its cache, so a
filesystem made by a guest a moment ago is seen. A partition table is looked into: each
partition ``partx`` lists is probed at its offset, as a guest would mount it.
"""

from __future__ import annotations

import subprocess
from typing import Final

from virtdriver.policy.filesystems import Signature

PROBE_TIMEOUT: Final = 30.0  # seconds; a probe reads a few sectors at a handful of offsets
SECTOR: Final = 512  # partx counts in 512-byte sectors


class UnreadableVolume(Exception):
    """blkid could not read the volume (one line, blkid's own words)."""


def read_signatures(path: str) -> list[Signature]:
    """The signatures in ``path`` (a block device or a file), its partitions' included."""
    found = _probe(path)
    if not any(s.usage == "partition table" for s in found):
        return found
    return [s for s in found if s.usage != "partition table"] + [
        signature for number, start, sectors in _partitions(path)
        for signature in _probe(path, offset=start * SECTOR, size=sectors * SECTOR,
                                where=f"partition {number}")]


def _probe(path: str, *, offset: int | None = None, size: int | None = None,
           where: str = "") -> list[Signature]:
    command = ["blkid", "--probe", "--output", "export"]
    if offset is not None and size is not None:
        command += ["--offset", str(offset), "--size", str(size)]
    result = _run(command + ["--", path])
    if result.returncode == 2:  # nothing found: raw or unknown data
        return []
    if result.returncode != 0:
        raise UnreadableVolume(_said(result) or f"blkid exited with {result.returncode}")
    fields = dict(line.partition("=")[::2] for line in result.stdout.splitlines() if "=" in line)
    if "PTTYPE" in fields and "TYPE" not in fields:
        return [Signature(fields["PTTYPE"], "partition table", where)]
    if "TYPE" not in fields:
        return []
    return [Signature(fields["TYPE"], fields.get("USAGE", "other"), where)]


def _partitions(path: str) -> list[tuple[int, int, int]]:
    result = _run(["partx", "--show", "--noheadings", "--output", "NR,START,SECTORS",
                   "--", path])
    if result.returncode != 0:
        raise UnreadableVolume(_said(result) or f"partx exited with {result.returncode}")
    rows = [line.split() for line in result.stdout.splitlines()]
    return [(int(nr), int(start), int(sectors)) for nr, start, sectors in rows]


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, capture_output=True, text=True, check=False,
                              timeout=PROBE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UnreadableVolume(f"{command[0]}: {exc}") from None


def _said(result: subprocess.CompletedProcess[str]) -> str:
    lines = (result.stderr or "").strip().splitlines()
    return lines[-1] if lines else ""
