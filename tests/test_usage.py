"""Which text an XML document must contain to hold the same data (the attach scan's filter)."""

from __future__ import annotations

import pytest

from virtdriver.config import Disk
from virtdriver.hypervisor.usage import source_key, source_text


@pytest.mark.parametrize(("xml", "text"), [
    ("<disk type='block' device='disk'><source dev='/dev/sdc'/><target dev='sda'/></disk>",
     "/dev/sdc"),
    ("<disk type='file' device='disk'><source file='/mnt/v/volume-1'/><target dev='sda'/></disk>",
     "/mnt/v/volume-1"),
    ("<disk type='network' device='disk'><source protocol='rbd' name='volumes/volume-1'>"
     "<host name='10.0.0.1' port='6789'/></source><target dev='sda'/></disk>",
     "volumes/volume-1"),
    # characters libvirt escapes in its XML: nothing reliable to look for, everything is parsed
    ("<disk type='file' device='disk'><source file='/mnt/a&amp;b'/><target dev='sda'/></disk>",
     None),
    ("<disk type='file' device='disk'><source file=\"/mnt/it's\"/><target dev='sda'/></disk>",
     None),
    ("<disk type='network' device='disk'><source protocol='nbd'><host name='127.0.0.1' "
     "port='10809'/></source><target dev='sda'/></disk>", None),
    ("<disk type='file' device='cdrom'><target dev='hdc'/></disk>", None),
])
def test_source_text(xml: str, text: str | None) -> None:
    disk = Disk.from_xml(xml)
    assert source_text(disk) == text
    if text is not None:  # the text really is in the XML of a disk with that source
        assert text in disk.to_xml()
        assert source_key(Disk.from_xml(disk.to_xml())) == source_key(disk)
