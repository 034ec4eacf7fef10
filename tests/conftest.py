"""Shared fixtures: libvirt's RelaxNG schema, the fixture folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from virtdriver.schema import disk_schema, validate_disk

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


@pytest.fixture(scope="session")
def schema_valid():
    """A checker that asserts a disk XML validates against libvirt's own schema."""
    disk_schema()  # compile once for the session; fails loudly if the schemas are missing
    return validate_disk
