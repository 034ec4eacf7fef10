"""libvirt itself as the oracle of the render tests.

:func:`define_refusal` defines a minimal (never started) domain holding one ``<disk>`` on the
real ``qemu:///system`` with libvirt's own schema validation, undefines it at once, and returns
libvirt's refusal (``None`` when it accepted the disk). That covers libvirt's RelaxNG schema and
every rule its QEMU driver checks at define time (throttle ceiling, lun, read-only buses, ...).

:class:`HotPlugOracle` attaches a disk to a running guest and detaches it again: it covers what
only QEMU checks when the device is created (block sizes, burst lengths, ``size_iops_sec``).
"""

from __future__ import annotations

import re
import secrets

import libvirt

from testhosts.guests import DeviceEvents, detach_and_wait

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
    from testhosts.guests import guest_xml

    name = f"vdtest-oracle-{secrets.token_hex(4)}"
    xml = guest_xml(name, kvm=kvm).replace("</devices>", disk_xml + "</devices>")
    try:
        dom = conn.createXML(xml, 0)
    except libvirt.libvirtError as exc:
        return exc.get_error_message()
    dom.destroy()
    return None


_ALIAS = re.compile(r"<alias name='([^']+)'/>")


def qemu_throttle_name(key: str) -> str:
    """libvirt's ``<iotune>`` name in QEMU's ``query-block`` terms (read_iops_sec_max ->
    iops_rd_max)."""
    if key == "size_iops_sec":
        return "iops_size"
    kind, unit, rest = key.split("_", 2)  # "read", "iops", "sec_max_length"
    side = {"total": "", "read": "_rd", "write": "_wr"}[kind]
    return ("bps" if unit == "bytes" else "iops") + side + rest[len("sec"):]


def throttle_mismatch(dom: libvirt.virDomain, alias: str, disk_xml: str) -> str | None:
    """What QEMU does not apply of the disk's ``<iotune>``. libvirt 9.0 reports a hot-plug
    whose throttle QEMU refused as a success, with the ``<iotune>`` in the live XML and no
    throttling at all; this is how the oracle sees it."""
    from lxml import etree

    from testhosts.guests.monitor import query_block

    iotune = etree.fromstring(disk_xml.encode()).find("iotune")
    if iotune is None:
        return None
    # the qdev of a SCSI disk is its alias; a USB disk's backend sits on a path below it
    (block,) = [b for b in query_block(dom) if alias in (b.get("qdev") or "").split("/")]
    applied = block.get("inserted") or {}
    wrong = [f"{child.tag}={child.text} (QEMU: {applied.get(qemu_throttle_name(child.tag))})"
             for child in iotune
             if applied.get(qemu_throttle_name(child.tag)) != int(child.text or "0")]
    return f"throttle not applied: {', '.join(wrong)}" if wrong else None


class HotPlugOracle:
    """Hot-plugs disks into one running guest (live only) and unplugs each one again."""

    def __init__(self, conn: libvirt.virConnect, dom: libvirt.virDomain) -> None:
        self.conn, self.dom = conn, dom
        self.events = DeviceEvents(conn)

    def refusal(self, disk_xml: str) -> str | None:
        """QEMU's or libvirt's message if the live attach fails, or if QEMU does not throttle
        the disk as its ``<iotune>`` says; ``None`` after a faithful attach and the detach."""
        try:
            self.dom.attachDeviceFlags(disk_xml, libvirt.VIR_DOMAIN_AFFECT_LIVE)
        except libvirt.libvirtError as exc:
            return exc.get_error_message()
        match = _ALIAS.search(disk_xml)
        assert match is not None, "hot-plugged disks carry a user alias to be found again"
        alias = match.group(1)
        try:
            return throttle_mismatch(self.dom, alias, disk_xml)
        finally:
            detach_and_wait(self.events, self.dom, disk_xml, alias, timeout=20)

    def close(self) -> None:
        self.events.close()
