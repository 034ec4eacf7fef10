"""Which of nova 34's functional tests exercise volumes in the compute driver (issue #21).

- four named modules of ``nova/tests/functional``;
- every module of ``nova/tests/functional/regressions`` whose text attaches, detaches, swaps,
  extends or migrates volumes, or boots from one (:data:`REGRESSION_PATTERN`), except those whose
  subject is nova's fake virt driver itself (:data:`REGRESSION_EXCLUDED`);
- the modules of ``nova/tests/functional/libvirt`` that move or rebuild guests (live migration,
  evacuate, device bus migration, rescue).
"""

from __future__ import annotations

import re
from pathlib import Path

FUNCTIONAL = "nova.tests.functional"

NAMED = ("test_multiattach", "test_boot_from_volume", "test_cross_az_attach",
         "test_conf_max_attach_disk_devices")

REGRESSION_PATTERN = re.compile(
    r"os-volume_attachments|attach_volume|swap_volume|extend_volume|volume-extended"
    r"|multiattach|MULTIATTACH|block_device_mapping_v2|IMAGE_BACKED_VOL|detach_volume"
    r"|post_server_volume|delete_server_volume|put_server_volume"
    r"|_create_server_boot_from_volume")

#: regression modules the pattern finds but whose subject is nova's fake virt driver.
REGRESSION_EXCLUDED = {
    "test_bug_1784353": "needs nova's fake.FakeRescheduleDriver (a build that fails on purpose)",
    "test_bug_1889108": "makes nova.virt.fake.FakeDriver.pre_live_migration fail; a libvirt "
                        "driver never calls it",
}

LIBVIRT = ("test_live_migration", "test_evacuate", "test_device_bus_migration",
           "test_rescue_deleted_base")

SETS = ("named", "regressions", "libvirt")


def _package_dir() -> Path:
    import nova.tests.functional as functional

    return Path(functional.__file__).parent


def regression_modules() -> list[str]:
    found = []
    for path in sorted((_package_dir() / "regressions").glob("test_*.py")):
        if path.stem not in REGRESSION_EXCLUDED and REGRESSION_PATTERN.search(path.read_text()):
            found.append(path.stem)
    return found


def modules(which: str) -> list[str]:
    """Dotted module names of one set: ``named``, ``regressions`` or ``libvirt``."""
    if which == "named":
        return [f"{FUNCTIONAL}.{name}" for name in NAMED]
    if which == "regressions":
        return [f"{FUNCTIONAL}.regressions.{name}" for name in regression_modules()]
    if which == "libvirt":
        return [f"{FUNCTIONAL}.libvirt.{name}" for name in LIBVIRT]
    raise ValueError(f"unknown set {which!r}: one of {', '.join(SETS)}")
