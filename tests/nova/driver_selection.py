"""The tests of nova 34's ``nova/tests/unit/virt/libvirt/test_driver.py`` whose subject is a
volume (issue #21, part 2), chosen from the test's name, else from its body.

- by name: attach/detach/swap/extend of volumes, multiattach, connection_info, block copy and
  block jobs, ``_should_disconnect_target``/disconnect, the volume driver table, the encryptors
  and LUKS, disk config of volumes (buses, SCSI, cache mode, discard, block I/O, QoS, the
  guest's storage config), booting from volumes, moving guests with volumes (pre/post/rollback
  of live migration, the copied disk paths, finishing and reverting a cold migration), volume
  snapshots, device detach with retries;
- by body: a test that calls the volume steps (``_get_volume_config``, ``_connect_volume``,
  ``_disconnect_volume``, ``attach_volume``, ``swap_volume``, ...) or builds ``connection_info``
  with a ``driver_volume_type``;
- never: network interfaces, PCI/mediated devices, memory or ephemeral-disk encryption, swap
  *disks* (not volumes): their names match words above but their subject is not a volume.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

MODULE = "nova.tests.unit.virt.libvirt.test_driver"

NAME = re.compile(
    r"volume|multiattach|connection_info|block_?copy|blockjob|block_job|disconnect|bdm"
    r"|block_device|iotune|qos|luks|encryptor|cache_mode|disk_bus|scsi|_detach_with_retry"
    r"|attach_blockio|discard|rescue_stable_device|from_volume|volume_backed|lun"
    r"|pre_live_migration|post_live_migration|rollback_live_migration|copy_disk_paths"
    r"|storage_config|live_migration_update|finish_migration|finish_revert_migration")
BODY = re.compile(
    r"_get_volume_config|_connect_volume|_disconnect_volume|\.attach_volume|\.detach_volume"
    r"|swap_volume|extend_volume|_should_disconnect_target|_get_volume_driver|multiattach"
    r"|_update_volume_xml|driver_volume_type")
NOT_VOLUMES = re.compile(
    r"interface|pci|passthrough|mediated|mem(ory)?_encryption|ephemeral_encryption|vpmem|sev"
    r"|tdx|_swap_cache|with_swap|create_swap|and_power_off_swap")


def selected_functions() -> set[str]:
    """Names of the selected test functions (as written: ddt expands some into several)."""
    import nova.tests.unit.virt.libvirt as package

    path = Path(package.__file__).parent / "test_driver.py"
    source = path.read_text()
    lines = source.splitlines()
    names = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test"):
            continue
        if NOT_VOLUMES.search(node.name):
            continue
        body = "\n".join(lines[node.lineno - 1:node.end_lineno])
        if NAME.search(node.name) or BODY.search(body):
            names.add(node.name)
    return names


def is_selected(method: str, functions: set[str]) -> bool:
    """``method`` is a selected function, or one of ddt's expansions of it (``name_1_...``)."""
    if method in functions:
        return True
    base = re.match(r"(.+?)_\d+(_.*)?$", method)
    return bool(base) and any(method.startswith(f + "_") and re.match(r"_\d+", method[len(f):])
                              for f in functions)
