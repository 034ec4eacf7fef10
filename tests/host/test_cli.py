"""The command line on a real libvirtd: closed readers, and render asking the host it is on."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import FIXTURES
from tests.fast.test_cli import CI, run


@pytest.mark.hypervisor
@pytest.mark.parametrize("args", [["capabilities"], ["capabilities", "--json"]])
def test_a_table_to_a_reader_that_went_away_is_one_line(args: list[str], system_conn) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "virtdriver", *args], stdout=write_end,
                              stderr=subprocess.PIPE, check=False, timeout=60)
    finally:
        os.close(write_end)
    assert done.returncode == 2
    assert done.stderr.decode() == "virtdriver: error: standard output is closed\n"


@pytest.mark.hypervisor
def test_render_writes_the_labels_attach_would_on_this_host(system_conn) -> None:
    """Per-disk labels only for the security drivers this host's libvirt runs (#47)."""
    from virtdriver.hypervisor.connection import security_models

    models = security_models(system_conn.getCapabilities())
    local = str(CI / "local.json")
    done = run("render", local, "--label-policy", "none")
    assert done.returncode == 0, done.stderr
    written = set(re.findall(r"<seclabel model='(\w+)' relabel='no'/>", done.stdout))
    assert written == {m for m in ("selinux", "dac") if m in models}
    done = run("render", local, "--multiattach", "--label-policy", "explicit",
               "--shared-image-label", "system_u:object_r:svirt_image_t:s0")
    if "selinux" in models:
        assert done.returncode == 0 and "svirt_image_t" in done.stdout
    else:  # attach refuses it here, and so does render
        assert done.returncode == 3 and "runs no SELinux security driver" in done.stderr
