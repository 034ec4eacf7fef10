"""Fixtures of the embedded-driver child run: the process's one qemu:///embed root."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from testhosts.guests import Guests, embed_uri, process_embed_root
from tests.support.fixtures import made_guests, opened


@pytest.fixture(scope="module")
def embed_conn() -> Iterator[libvirt.virConnect]:
    yield from opened(embed_uri(process_embed_root()))


@pytest.fixture
def embed_guests(embed_conn: libvirt.virConnect) -> Iterator[Guests]:
    yield from made_guests(embed_conn)


@pytest.fixture
def embed_driver(tmp_path: Path, embed_conn: libvirt.virConnect) -> Iterator[Any]:
    from virtdriver import LibvirtVolumeDriver

    driver = LibvirtVolumeDriver(embed_uri(process_embed_root()), state_dir=tmp_path / "state")
    yield driver
    driver.close()
