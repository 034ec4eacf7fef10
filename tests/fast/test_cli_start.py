"""What a command imports at its start (never the heavy optional parts), and its logging.

Each case runs the real CLI in a fresh interpreter: what a module imported at its top is seen
only there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT

FIXTURES = ROOT / "fixtures" / "connection_info"

PROBE = """
import json, sys
from virtdriver.cli import main
code = main(sys.argv[1:])
imported = [m for m in ("logging", "libvirt", "os_brick", "tqdm", "requests")
            if m in sys.modules]
import logging
root = logging.getLogger()
print(json.dumps({"code": code, "imported": imported, "level": root.level,
                  "handlers": [type(h.formatter).__name__ for h in root.handlers]}))
"""


def run_cli(*argv: str) -> tuple[dict, str]:
    """The CLI's exit code, which of logging and the heavy optional parts (libvirt, os-brick,
    tqdm, requests) the command imported, the root logger's handlers and level, and stderr."""
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def test_render_imports_neither_libvirt_nor_os_brick():
    result, stderr = run_cli("render", str(FIXTURES / "iscsi-multiattach.json"))
    assert result["code"] == 0 and stderr == ""
    assert result["imported"] == ["logging"]


def test_a_warning_while_rendering_is_not_shown(tmp_path):
    info = json.loads((FIXTURES / "nfs.json").read_text())
    info["data"]["qos_specs"] = {"consumer": "front-end", "total_bytes_sec": 1000}
    path = tmp_path / "qos.json"
    path.write_text(json.dumps(info))
    result, stderr = run_cli("render", "--mount-base", str(tmp_path), str(path))
    assert result["code"] == 0
    # one-line records, errors only: the unknown key's warning is not printed
    assert result["handlers"] == ["OneLine"] and result["level"] == 40
    assert stderr == ""


def test_other_commands_set_logging_up_at_their_start(tmp_path):
    # others' loggers (os-brick's, oslo's) may log during these: set up before they run
    result, _ = run_cli("--state-dir", str(tmp_path), "release",
                        "0bd4a2b8-0c55-4c8e-a4a4-7c6f0e6a1d10")
    assert result["code"] == 0 and "logging" in result["imported"]
    assert result["handlers"] == ["OneLine"]
