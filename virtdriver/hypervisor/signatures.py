"""What a volume holds, read on this host with blkid's low-level probe (libblkid) and wipefs.

``blkid --probe`` reads the signatures in the device or file itself, never its cache, so a
filesystem made by a guest a moment ago is seen. When it finds several that exclude each other
("ambivalent", exit 8) every candidate it names is kept, with a mark that it could not decide;
``wipefs`` then lists every other signature in the volume, whatever blkid chose. A partition
table is looked into: each partition ``partx`` lists is probed at its offset, as a guest would
mount it, and a table nested in a partition is read through a read-only loop device over that
partition, :data:`MAX_DEPTH` tables deep at most.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from typing import Final

from virtdriver.policy.filesystems import PARTITION_TABLE, UNDECIDED, Signature

PROBE_TIMEOUT: Final = 30.0  # seconds; a probe reads a few sectors at a handful of offsets
SECTOR: Final = 512  # partx counts in 512-byte sectors
MAX_DEPTH: Final = 4  # partition tables inside partitions, looked into at most this deep
CONTAINERS: Final = ("0x5", "0xf", "0x85")  # DOS extended partitions: partx lists their insides


class UnreadableVolume(Exception):
    """blkid could not read the volume (one line, blkid's own words)."""


def read_signatures(path: str, *, depth: int = 0, where: str = "") -> list[Signature]:
    """Every signature in ``path`` (a block device or a file), its partitions' included."""
    found = _probe(path, where=where)
    found += _listed_by_wipefs(path, found, where)
    if not any(s.usage == PARTITION_TABLE for s in found):
        return found
    for number, start, sectors in _partitions(path):
        inside = f"{where}, partition {number}" if where else f"partition {number}"
        offset, size = start * SECTOR, sectors * SECTOR
        held = _probe(path, offset=offset, size=size, where=inside)
        if not any(s.usage == PARTITION_TABLE for s in held):
            found += held
        elif depth + 1 >= MAX_DEPTH:
            found += [*held, Signature(f"partition tables nested more than {MAX_DEPTH} deep",
                                       UNDECIDED, inside)]
        else:
            with _region(path, offset, size) as device:
                found += read_signatures(device, depth=depth + 1, where=inside)
    return found


def _probe(path: str, *, offset: int | None = None, size: int | None = None,
           where: str = "", only: str | None = None) -> list[Signature]:
    command = ["blkid", "--probe", "--output", "udev"]
    if offset is not None and size is not None:
        command += ["--offset", str(offset), "--size", str(size)]
    if only is not None:
        command += ["--match-types", only]
    result = _run(command + ["--", path])
    if result.returncode == 2:  # nothing found: raw or unknown data
        return []
    fields = dict(line.partition("=")[::2] for line in result.stdout.splitlines() if "=" in line)
    if result.returncode == 8:  # ambivalent: several signatures that exclude each other
        return _ambivalent(fields.get("ID_FS_AMBIVALENT", ""), where)
    if result.returncode != 0:
        raise UnreadableVolume(_said(result) or f"blkid exited with {result.returncode}")
    found = []
    if "ID_FS_TYPE" in fields:
        found.append(Signature(fields["ID_FS_TYPE"], fields.get("ID_FS_USAGE", "other"), where))
    if "ID_PART_TABLE_TYPE" in fields:
        found.append(Signature(fields["ID_PART_TABLE_TYPE"], PARTITION_TABLE, where))
    return found


def _ambivalent(candidates: str, where: str) -> list[Signature]:
    """The candidates of an ambivalent probe (``usage:type:version ...``), and the mark."""
    found = []
    for word in candidates.split():
        usage, _, rest = word.partition(":")
        if rest:
            found.append(Signature(rest.partition(":")[0], usage, where))
    names = ", ".join(s.type for s in found) or "no name given"
    return [*found, Signature(f"blkid found signatures that exclude each other ({names})",
                              UNDECIDED, where)]


def _listed_by_wipefs(path: str, seen: list[Signature], where: str) -> list[Signature]:
    """The signatures wipefs lists in ``path`` that blkid's probe did not name, each with the
    usage blkid gives it when asked for that type alone."""
    result = _run(["wipefs", "--no-act", "--json", "--", path])
    if result.returncode != 0:
        raise UnreadableVolume(_said(result) or f"wipefs exited with {result.returncode}")
    try:
        listed = json.loads(result.stdout or "{}").get("signatures", [])
        types = sorted({str(entry["type"]) for entry in listed})
    except (ValueError, KeyError, TypeError, AttributeError):
        raise UnreadableVolume("wipefs gave output that is not its JSON listing") from None
    known = {s.type for s in seen}
    found = []
    for kind in (t for t in types if t not in known):
        named = [s for s in _probe(path, where=where, only=kind) if s.usage != UNDECIDED]
        found += named or [Signature(kind, "unknown", where)]
    return [s for s in found if s.type not in known]


def _partitions(path: str) -> list[tuple[int, int, int]]:
    result = _run(["partx", "--show", "--noheadings", "--output", "NR,START,SECTORS,TYPE",
                   "--", path])
    if result.returncode != 0:
        raise UnreadableVolume(_said(result) or f"partx exited with {result.returncode}")
    rows = [line.split() for line in result.stdout.splitlines() if line.strip()]
    try:
        return [(int(row[0]), int(row[1]), int(row[2])) for row in rows
                if len(row) < 4 or row[3].lower() not in CONTAINERS]
    except (ValueError, IndexError):
        raise UnreadableVolume("partx gave a partition list it could not be read from") from None


@contextlib.contextmanager
def _region(path: str, offset: int, size: int) -> Iterator[str]:
    """A read-only loop device over ``size`` bytes of ``path`` at ``offset``, detached after."""
    made = _run(["losetup", "--find", "--show", "--read-only", "--offset", str(offset),
                 "--sizelimit", str(size), "--", path])
    device = made.stdout.strip()
    if made.returncode != 0 or not device.startswith("/dev/"):
        raise UnreadableVolume(_said(made) or "losetup gave no device for a nested table")
    try:
        yield device
    finally:
        _run(["losetup", "--detach", device])


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, capture_output=True, text=True, errors="replace",
                              check=False, timeout=PROBE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UnreadableVolume(f"{command[0]}: {exc}") from None


def _said(result: subprocess.CompletedProcess[str]) -> str:
    lines = (result.stderr or "").strip().splitlines()
    return lines[-1] if lines else ""
