"""Fuzzing against libvirt itself: every disk a running guest holds round-trips the reader."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from lxml import etree

from tests.fast.test_fuzz import assert_disks_round_trip
from virtdriver import build_disk
from virtdriver.cli import main as cli_main
from virtdriver.config import Disk, DomainDisks
from virtdriver.errors import EXIT_CODES, VirtDriverError
from virtdriver.render import QOS_KEYS
from virtdriver.volume import known_types

EXTRA_DISK = """<disk type='file' device='disk'>
  <driver name='qemu' type='raw' cache='none' error_policy='stop' rerror_policy='stop'
          detect_zeroes='on' discard='unmap'/>
  <source file='{path}'><seclabel model='dac' relabel='no'/></source>
  <target dev='sdc' bus='scsi' rotation_rate='1'/>
  <wwn>0x5000c50015ea71ad</wwn><vendor>VDTEST</vendor><product>FUZZ</product>
  <alias name='ua-extra-disk'/>
  <address type='drive' controller='0' bus='0' target='0' unit='2'/>
</disk>"""



@pytest.mark.hypervisor
def test_a_running_guests_live_xml_round_trips(guests, volume_driver, loop_device,
                                               tmp_path) -> None:
    import libvirt

    from tests.support.volumes import file_volume, local_volume

    dom = guests.start("xml")
    images = []
    for name in ("v.raw", "extra.raw"):
        image = tmp_path / name
        image.write_bytes(b"")
        os.truncate(image, 1 << 20)
        images.append(image)
    volume_driver.attach_volume(local_volume(loop_device.device, multiattach=True), dom.name(),
                                attach_mode="ro")
    volume_driver.attach_volume(file_volume(str(images[0]), multiattach=False), dom.name())
    # A disk with parts libvirt knows and the model may not, attached the plain libvirt way.
    dom.attachDeviceFlags(EXTRA_DISK.format(path=images[1]),
                          libvirt.VIR_DOMAIN_AFFECT_LIVE | libvirt.VIR_DOMAIN_AFFECT_CONFIG)
    checked = 0
    for flags in (0, libvirt.VIR_DOMAIN_XML_INACTIVE, libvirt.VIR_DOMAIN_XML_SECURE,
                  libvirt.VIR_DOMAIN_XML_UPDATE_CPU):
        xml = dom.XMLDesc(flags)
        assert "<controller" in xml and "<wwn>" in xml
        checked += assert_disks_round_trip(xml)
    assert checked == 12
    # libvirt's live XML carries parts the model does not declare (<backingStore/>, ...): they
    # are kept as unknown parts and written back.
    live = dom.XMLDesc(0)
    rewritten = "".join(d.to_xml() for d in DomainDisks.from_xml(live).disks)
    for marker in ("<backingStore/>", "<wwn>", "<vendor>", "error_policy=", "detect_zeroes="):
        assert (marker in live) == (marker in rewritten), marker



def assert_live_disk_round_trips(disk_xml: str) -> str:
    """Lenient keeps the meaning and is a fixed point; strict reads it all or names what it
    does not declare. Returns how strict fared."""
    from tests.fast.test_model import assert_lenient_keeps_meaning, meaning

    assert_lenient_keeps_meaning(disk_xml)
    try:
        strict = Disk.from_xml(disk_xml)
    except VirtDriverError as exc:
        assert "undeclared" in str(exc) or "only once" in str(exc) or "must" in str(exc), exc
        return "strict refused"
    assert meaning(etree.fromstring(strict.to_xml())) == meaning(etree.fromstring(disk_xml))
    return "strict read"



def live_disks(conn) -> list[str]:
    import libvirt

    disks = []
    for dom in conn.listAllDomains():
        for flags in (0, libvirt.VIR_DOMAIN_XML_INACTIVE):
            try:
                root = etree.fromstring(dom.XMLDesc(flags).encode())
            except libvirt.libvirtError:  # another test removed it meanwhile
                continue
            disks += [etree.tostring(d, encoding="unicode") for d in root.iterfind("devices/disk")]
    return disks



@pytest.mark.hypervisor
def test_every_disk_libvirt_writes_round_trips(guests, volume_driver, loop_device, system_conn,
                                               backends, tmp_path) -> None:
    """The disks of the guests the test suite runs (here: one of each kind this test attaches,
    and whatever other tests' guests hold at the moment), as libvirt writes them, live and
    inactive: read leniently they keep their meaning; read strictly they are read whole or
    refused with a name."""
    from tests.support.volumes import file_volume, local_volume

    dom = guests.start("corpus")
    image = tmp_path / "q.raw"
    image.write_bytes(b"")
    os.truncate(image, 1 << 20)
    volume_driver.attach_volume(local_volume(loop_device.device, multiattach=True), dom.name(),
                                attach_mode="ro")
    rich = file_volume(str(image), multiattach=False)
    rich["data"].update(qos_specs={"read_iops_sec": 500, "write_bytes_sec": 1 << 20,
                                   "read_iops_sec_max": 1000, "read_iops_sec_max_length": 5},
                        logical_block_size=512, physical_block_size=4096, discard=True)
    volume_driver.attach_volume(rich, dom.name())
    if backends.get("VD_NBD_UP") == "1":  # a network disk too, when the backend runs
        vid = str(uuid.uuid4())
        volume_driver.attach_volume(
            {"driver_volume_type": "nbd", "serial": vid, "multiattach": True,
             "data": {"volume_id": vid, "host": backends["VD_NBD_HOST"],
                      "port": int(backends["VD_NBD_PORT"]), "name": backends["VD_NBD_EXPORT"]}},
            dom.name(), attach_mode="ro")
    own = [d for d in live_disks(system_conn) if "ua-" in d and str(image) in d
           or loop_device.device in d]
    assert len(own) >= 4
    other = tmp_path / "extra.raw"
    other.write_bytes(b"")
    os.truncate(other, 1 << 20)
    extra = EXTRA_DISK.format(path=other).replace("sdc", "sdh").replace("unit='2'", "unit='7'")
    dom.attachDeviceFlags(extra, 0)  # parts the model may not declare
    corpus = live_disks(system_conn)
    outcomes = [assert_live_disk_round_trips(d) for d in corpus]
    assert "strict read" in outcomes, "the disks virtdriver renders are read strictly, whole"
