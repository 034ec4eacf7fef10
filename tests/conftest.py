"""Shared fixtures: libvirt's RelaxNG schema, the fixture folders, and (from tests/support/)
a real libvirtd, real OS-less guests and loop devices."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testhosts.guests.loop import LOOP_RANGE_ENV
from tests.support import EMBED_CHILD, ROOT
from tests.support.backends import (  # noqa: F401 - fixtures, found by name
    backends,
    ceph_secret,
    private_mount_base,
)
from tests.support.fixtures import (  # noqa: F401 - fixtures, found by name
    events,
    guests,
    loop_device,
    raw_file,
    second_loop,
    system_conn,
    volume_driver,
)
from virtdriver.config.schema import disk_schema, validate_disk

FIXTURES = ROOT / "fixtures"


@pytest.fixture(scope="session")
def schema_valid():
    """A checker that asserts a disk XML validates against libvirt's own schema."""
    disk_schema()  # compile once for the session; fails loudly if the schemas are missing
    return validate_disk


# Two pytest-xdist workers (scripts/test.sh) each take loop devices from numbers of their own: a
# number one worker's test freed may still be named by that test's guest while the other's next
# test binds it, and virtdriver then rightly refuses to share the device (#57).
if os.environ.get("PYTEST_XDIST_WORKER", "").startswith("gw"):
    _worker = int(os.environ["PYTEST_XDIST_WORKER"][2:])
    os.environ[LOOP_RANGE_ENV] = f"{1000 * (_worker + 1)}-{1000 * (_worker + 1) + 999}"

# The embedded driver's tests run in a child pytest of their own (tests/host/test_embed.py).
collect_ignore = [] if EMBED_CHILD else ["host/embed"]
# tests/nested runs inside the nested test host only (scripts/test-nested.sh sets it).
if not os.environ.get("VIRTDRIVER_NESTED"):
    collect_ignore.append("nested")
