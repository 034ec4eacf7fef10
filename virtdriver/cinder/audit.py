"""``virtdriver audit --cinder URL``: where the guests and Cinder's attachments disagree.

For every attachment that ``attach --cinder`` remembered in a guest's metadata: Cinder no longer
has it (the guest holds a volume nobody granted), the guest no longer has the disk (Cinder still
counts an attachment nobody uses), or the guest's mode differs from the attachment's
``attach_mode`` (a ``ro`` grant used read-write, or the reverse). Reported as ``cinder`` dangers.
"""

from __future__ import annotations

import libvirt

from virtdriver.cinder.client import Cinder
from virtdriver.cinder.flow import notes_of
from virtdriver.errors import CinderError
from virtdriver.ops.audit import AuditReport, VolumeAudit
from virtdriver.policy.sharing import Danger


def add_cinder_dangers(report: AuditReport, conn: libvirt.virConnect, cinder: Cinder) -> None:
    """Add a ``cinder`` danger for every disagreement (the report is changed in place)."""
    for dom in conn.listAllDomains(0):
        for vid, (att_id, url) in sorted(notes_of(dom).items()):
            if url.rstrip("/") != cinder.url:
                continue  # another Cinder's attachment: not ours to judge
            message = _disagreement(report, dom.name(), vid, att_id, cinder)
            if message is None:
                continue
            volume = report.volume(vid)
            if volume is None:
                volume = VolumeAudit(vid, "", [], [], False)
                report.volumes.append(volume)
            volume.dangers.append(Danger("cinder", message))


def _disagreement(report: AuditReport, guest: str, vid: str, att_id: str,
                  cinder: Cinder) -> str | None:
    volume = report.volume(vid)
    modes = {a.mode for a in (volume.attachments if volume else []) if a.guest == guest}
    try:
        record = cinder.call("GET", f"/attachments/{att_id}")["attachment"]
    except CinderError as exc:
        if exc.status != 404:
            raise
        record = None
    if record is None:
        if modes:
            return (f"guest {guest} uses volume {vid} under Cinder attachment {att_id}, which "
                    "Cinder no longer has: detach it, or attach it again through Cinder")
        return None
    if not modes:
        return (f"Cinder attachment {att_id} of volume {vid} for guest {guest} remains, but the "
                f"guest no longer has the disk: 'virtdriver detach {guest} {vid}' or delete it")
    if record.get("attach_mode") and modes != {record["attach_mode"]}:
        return (f"guest {guest} has volume {vid} {'/'.join(sorted(modes))}, but its Cinder "
                f"attachment {att_id} grants {record['attach_mode']}")
    return None
