"""testhosts.guests against the embedded driver, in its own process (tests/host/test_embed.py)."""

from __future__ import annotations

import time
from pathlib import Path

import libvirt
import pytest

from testhosts import guests as g
from tests.support.volumes import disk_xml


@pytest.mark.hypervisor
def test_embed_minimal_flow(embed_conn: libvirt.virConnect, raw_file: Path) -> None:
    root = g.embed_root_of(embed_conn.getURI())
    assert root is not None and (root / "etc" / "qemu.conf").exists()
    with g.Guests(embed_conn) as gs, g.DeviceEvents(embed_conn) as ev:
        t0 = time.monotonic()
        dom = gs.start("emb")
        # KVM works under embed when QEMU runs as root (EMBED_QEMU_CONF).
        assert gs.kvm == g.kvm_available(), gs.kvm_fallback_reason
        started = time.monotonic() - t0
        xml = disk_xml(raw_file, "ua-test1")
        dom.attachDeviceFlags(xml, libvirt.VIR_DOMAIN_AFFECT_LIVE)
        assert not g.block_info(dom, "ua-test1").ro
        assert g.domain_log_path(dom) == root / "log" / "qemu" / f"{dom.name()}.log"
        g.write_pattern(dom, "ua-test1", 0x77)
        assert g.read_pattern(dom, "ua-test1", 0x77)
        assert g.detach_and_wait(ev, dom, xml, "ua-test1") < 10
        assert started < 30
        name = dom.name()
    with pytest.raises(libvirt.libvirtError):
        embed_conn.lookupByName(name)

