"""Doctor's probe of SCSI persistent reservations: can a guest's reservations reach a target?

Two routes (see :mod:`virtdriver.policy.reservations`): a host block device passed through as
``device='lun'`` with ``<reservations managed='yes'/>`` needs ``qemu-pr-helper`` (libvirt starts
one per guest; the binary is ``pr_helper`` in libvirt's ``qemu.conf``, by default found on
``PATH``); QEMU-native iSCSI needs QEMU's ``iscsi`` block driver (libiscsi, in Debian's
``qemu-block-extra``). Neither is needed for multiattach itself: a host without them warns.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from virtdriver.ops.doctor.verdict import Check, Status

QEMU_CONF = Path("/etc/libvirt/qemu.conf")
DEFAULT_PR_HELPER = "qemu-pr-helper"
_PR_HELPER = re.compile(r'^\s*pr_helper\s*=\s*"([^"]*)"', re.MULTILINE)


def configured_pr_helper(qemu_conf: Path = QEMU_CONF) -> str:
    """The helper libvirt starts for managed reservations (``pr_helper`` in ``qemu.conf``)."""
    try:
        found = _PR_HELPER.findall(qemu_conf.read_text(errors="replace"))
    except OSError:
        found = []
    return found[-1] if found else DEFAULT_PR_HELPER


def pr_helper_path(name: str) -> str | None:
    """Where the helper is, or ``None`` when it is not there (or not executable)."""
    if os.sep in name:
        return name if os.access(name, os.X_OK) else None
    return shutil.which(name)


def reservations_check(facts: dict[str, Any], qemu_block_drivers: set[str],
                       qemu_conf: Path = QEMU_CONF) -> Check:
    """Whether this host can pass a guest's SCSI persistent reservations to a target."""
    helper = configured_pr_helper(qemu_conf)
    where = pr_helper_path(helper)
    native = "iscsi" in qemu_block_drivers
    facts["reservations"] = {"pr_helper": helper, "pr_helper_path": where,
                             "host_block_devices": where is not None,
                             "qemu_native_iscsi": native}
    block = (f"host block devices: yes ({where}, started by libvirt for <reservations "
             f"managed='yes'/>; the target sees the host's initiator)" if where else
             f"host block devices: no ({helper} not found: install qemu-system-common or set "
             f"pr_helper in {qemu_conf})")
    iscsi = ("QEMU-native iSCSI: yes (libiscsi; the target sees the initiator name "
             "each guest's QEMU logs in as)" if native
             else "QEMU-native iSCSI: no (QEMU's iscsi driver missing: qemu-block-extra)")
    status: Status = "ok" if where and native else "warn"
    return Check("storage", "reservations", status, f"SCSI persistent reservations on "
                 f"device='lun': {block}; {iscsi}")
