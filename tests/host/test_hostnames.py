"""Host names and addresses through libvirt's own parser: every rendered form is read back."""

from __future__ import annotations

import ipaddress
import string
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree

from tests.fast.test_hostnames import PROTOCOLS
from virtdriver import build_disk
from virtdriver.config.schema import validate_disk
from virtdriver.errors import InvalidConnectionInfo
from virtdriver.volume.base import RenderOptions


@pytest.mark.hypervisor
def test_libvirt_parses_every_form_of_host_that_is_rendered(system_conn) -> None:
    """libvirt's own parser (defineXML with validation) accepts each form rendered."""
    from tests.libvirt_oracle import define_refusal

    for host in ["ceph-mon1.example.com", "a", "a-b.c0", "192.0.2.5", "2001:db8::5", "[::1]",
                 "::ffff:c000:205", "x" * 63 + ".example"]:
        for protocol in ("nbd", "rbd", "iscsi (QEMU)", "glusterfs (QEMU)"):
            make, _, _ = PROTOCOLS[protocol]
            info, options = make(host)
            xml = build_disk(info, **options).to_xml()
            assert define_refusal(system_conn, xml) is None, (protocol, host)
