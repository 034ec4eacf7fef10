"""The data check every sharing test makes, through each guest's own block backend (qemu-io)."""

from __future__ import annotations

import secrets

import libvirt
import pytest

from testhosts.guests import ReadOnlyWrite, read_pattern, write_pattern


def writer_shares_with_reader(writer: libvirt.virDomain, reader: libvirt.virDomain,
                              alias: str) -> tuple[int, int]:
    """``writer`` writes a random pattern at a random 4 KiB offset, ``reader`` reads it, and
    ``reader``'s own write there is refused (it has the volume read-only). Returns the pattern
    and the offset, for checks after a later step."""
    pattern = secrets.randbelow(200) + 20
    offset = secrets.randbelow(1000) * 4096
    write_pattern(writer, alias, pattern, offset=offset)
    assert read_pattern(reader, alias, pattern, offset=offset)
    with pytest.raises(ReadOnlyWrite):
        write_pattern(reader, alias, 0x01, offset=offset)
    return pattern, offset
