"""libvirt itself as the oracle of the render tests.

:func:`define_refusal` defines a minimal (never started) domain holding one ``<disk>`` on the real
``qemu:///system`` with libvirt's own schema validation, undefines it at once, and returns libvirt's
refusal (``None`` when it accepted the disk). That covers libvirt's RelaxNG schema and every rule
its QEMU driver checks at define time (throttle ceiling, lun, read-only buses, ...).

:class:`HotPlugOracle` attaches a disk to a running guest and detaches it again: it covers what only
QEMU checks when the device is created (block sizes, burst lengths, ``size_iops_sec``).
"""

from __future__ import annotations

import re
import secrets

import libvirt

from virtdriver.guests import DeviceEvents, detach_and_wait

_DOMAIN = """<domain type='kvm'>
  <name>{name}</name>
  <memory unit='MiB'>96</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices>
    <controller type='scsi' index='0' model='virtio-scsi'/>
    {disk}
  </devices>
</domain>"""


def define_refusal(conn: libvirt.virConnect, disk_xml: str) -> str | None:
    """libvirt's message if it refuses to define a domain with ``disk_xml``; ``None`` if not."""
    name = f"vdtest-oracle-{secrets.token_hex(4)}"
    try:
        dom = conn.defineXMLFlags(_DOMAIN.format(name=name, disk=disk_xml),
                                  libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
    except libvirt.libvirtError as exc:
        return exc.get_error_message()
    dom.undefine()
    return None


def start_refusal(conn: libvirt.virConnect, disk_xml: str, *, kvm: bool = True) -> str | None:
    """libvirt's or QEMU's message if a transient guest holding ``disk_xml`` fails to start.

    Slow when it starts (destroying takes about 1.5 s here): for a few examples only. Needed for
    ``<iotune>``, which libvirt 9.0 does not hand to QEMU on a live hot-plug.
    """
    from virtdriver.guests import guest_xml

    name = f"vdtest-oracle-{secrets.token_hex(4)}"
    xml = guest_xml(name, kvm=kvm).replace("</devices>", disk_xml + "</devices>")
    try:
        dom = conn.createXML(xml, 0)
    except libvirt.libvirtError as exc:
        return exc.get_error_message()
    dom.destroy()
    return None


_ALIAS = re.compile(r"<alias name='([^']+)'/>")


class HotPlugOracle:
    """Hot-plugs disks into one running guest (live only) and unplugs each one again."""

    def __init__(self, conn: libvirt.virConnect, dom: libvirt.virDomain) -> None:
        self.conn, self.dom = conn, dom
        self.events = DeviceEvents(conn)

    def refusal(self, disk_xml: str) -> str | None:
        """QEMU's or libvirt's message if the live attach fails; ``None`` after attach+detach."""
        try:
            self.dom.attachDeviceFlags(disk_xml, libvirt.VIR_DOMAIN_AFFECT_LIVE)
        except libvirt.libvirtError as exc:
            return exc.get_error_message()
        match = _ALIAS.search(disk_xml)
        assert match is not None, "hot-plugged disks carry a user alias to be found again"
        detach_and_wait(self.events, self.dom, disk_xml, match.group(1), timeout=20)
        return None

    def close(self) -> None:
        self.events.close()
