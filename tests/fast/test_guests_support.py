"""testhosts.guests without a daemon: its guest XML, KVM detection and embedded roots."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import libvirt
import pytest
from lxml import etree

from testhosts import guests as g
from tests.support.volumes import disk_xml

SCHEMA = Path("/usr/share/libvirt/schemas/domain.rng")


# --------------------------------------------------------------------------
# no hypervisor needed


@pytest.mark.parametrize("kvm", [True, False])
def test_guest_xml_is_valid_libvirt_xml(kvm: bool) -> None:
    if not SCHEMA.exists():
        pytest.skip("libvirt RelaxNG schemas not installed")
    xml = g.guest_xml("vdtest-x", kvm=kvm, memory_mib=96)
    doc = etree.fromstring(xml.encode())
    etree.RelaxNG(etree.parse(str(SCHEMA))).assertValid(doc)
    assert doc.get("type") == ("kvm" if kvm else "qemu")
    assert doc.findtext("on_poweroff") == "destroy"
    ctrl = doc.find("devices/controller")
    assert ctrl is not None
    assert (ctrl.get("type"), ctrl.get("index"), ctrl.get("model")) == (
        "scsi",
        "0",
        "virtio-scsi",
    )
    assert doc.find("devices/disk") is None
    assert doc.findtext("memory") == "96"


def test_kvm_available_matches_dev_kvm() -> None:
    expected = os.path.exists("/dev/kvm") and os.access("/dev/kvm", os.R_OK | os.W_OK)
    assert g.kvm_available() == expected


def test_embed_root_of() -> None:
    assert g.embed_root_of("qemu:///embed?root=/tmp/x") == Path("/tmp/x")
    assert g.embed_root_of("qemu:///system") is None


# --------------------------------------------------------------------------
# real libvirtd
