"""libvirt's parser reads the same disk from the original text and from what was written."""

from __future__ import annotations

import re
import secrets
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from tests.fast.test_model import meaning
from tests.fast.test_reader_lossless import DECLARATION, as_text, documents
from virtdriver.config import Disk
from virtdriver.config.schema import SchemaViolation, validate_disk
from virtdriver.errors import UndeclaredXML

_DOMAIN = """<domain type='kvm'><name>{name}</name><memory unit='MiB'>96</memory><vcpu>1</vcpu>
<os><type arch='x86_64' machine='pc'>hvm</type></os><devices>
<controller type='scsi' index='0' model='virtio-scsi'/>{disk}</devices></domain>"""



def libvirt_reads(conn: Any, disk_xml: str) -> str:
    """The <disk> as libvirt's own parser reads it (defined, read back, undefined), or its
    refusal. Without schema validation: libvirt's parser itself decides what it reads."""
    import libvirt

    try:
        dom = conn.defineXML(_DOMAIN.format(name=f"vdtest-reader-{secrets.token_hex(4)}",
                                            disk=disk_xml))
    except libvirt.libvirtError as exc:
        return f"refused: {exc.get_error_message()}"
    try:
        root = etree.fromstring(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE).encode())
        return etree.tostring(root.find("devices/disk"), encoding="unicode")
    finally:
        dom.undefine()



@pytest.mark.hypervisor
@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(doc=documents())
def test_libvirt_reads_the_same_disk_from_what_was_written(doc: tuple[Any, str | None],
                                                           system_conn) -> None:
    document, encoding = doc
    original = etree.fromstring(DECLARATION.sub("", as_text(document, encoding), count=1).encode())
    disk = Disk.from_xml(document, strict=False)
    written = etree.tostring(disk.to_element(), encoding="unicode")
    assert libvirt_reads(system_conn, written) == libvirt_reads(
        system_conn, etree.tostring(original, encoding="unicode"))
