"""The README's 5-minute tour, run verbatim: every command block in order, in one shell."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

pytestmark = pytest.mark.hypervisor


def tour_script() -> str:
    """The tour's indented blocks as one script; a line the README marks refused must exit 3."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## A 5-minute tour", 1)[1].split("\n## ", 1)[0]
    lines = []
    for line in section.splitlines():
        if not line.startswith("    "):
            continue
        command = line[4:]
        if re.search(r"#\s*refused", command):
            command = command.split("#", 1)[0].rstrip()
            command = f"{{ {command}; }} && exit 99 || [ $? -eq 3 ] || exit 98"
        lines.append(command)
    return "\n".join(lines) + "\n"


def test_the_readme_tour_runs_as_written() -> None:
    script = tour_script()
    assert "virtdriver attach tour-a" in script and "virtdriver swap" in script
    env = dict(os.environ)
    if shutil.which("virtdriver") is None:  # the README's export PATH=$PWD/.venv/bin:$PATH
        env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    try:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
        assert re.search(r"sda\s.*\bro\b", done.stdout)  # list tour-b: Mode ro
    finally:  # what the tour's last line would have cleaned up, had it got there
        subprocess.run("virsh -q destroy tour-a; virsh -q destroy tour-b; for f in "
                       "/tmp/tour-volume.raw /tmp/tour-new.raw; do for d in $(losetup -j $f -O "
                       "NAME -n); do losetup -d $d; done; done; rm -f /tmp/tour-*.raw "
                       "/tmp/tour-*.json", shell=True, capture_output=True, check=False)
