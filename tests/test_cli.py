"""The command line: exit codes, one-line errors, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import FIXTURES

CI = FIXTURES / "connection_info"


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "virtdriver", *args], input=stdin,
                          capture_output=True, text=True, check=False)


def test_render_multiattach_read_only(schema_valid) -> None:
    done = run("render", str(CI / "iscsi-multiattach.json"), "--attach-mode", "ro",
               "--bus", "scsi", "--scsi-unit", "3")
    assert done.returncode == 0 and done.stderr == ""
    assert "<readonly/>" in done.stdout and "<shareable/>" in done.stdout
    assert "<target dev='sdb' bus='scsi'/>" in done.stdout
    schema_valid(done.stdout)


def test_render_from_stdin_with_multiattach_flag() -> None:
    done = run("render", "-", "--multiattach", stdin=(CI / "local.json").read_text())
    assert done.returncode == 0 and "<shareable/>" in done.stdout
    assert "cache='none'" in done.stdout


def one_line_error(done: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert done.returncode == code
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("virtdriver: error: ")
    return lines[0]


def local_with(**data: object) -> str:
    info = json.loads((CI / "local.json").read_text())
    info["data"].update(data)
    return json.dumps(info)


@pytest.mark.parametrize("args, stdin, message", [
    (["render", "-"], "{not json", "standard input: not valid JSON"),
    (["render", "-"], "[]", "connection_info: is not a JSON object"),
    (["render", "-"], "\"text\"", "connection_info: is not a JSON object"),
    (["render", "-"], json.dumps({"driver_volume_type": "local"}), "connection_info.data"),
    (["render", "-"], local_with(device_path="relative/dev"), "is not an absolute path"),
    (["render", "-"], local_with(device_path="/dev/a\n/dev/b"), "single line"),
    (["render", "-"], local_with(qos_specs={"read_iops_sec": "lots"}),
     "connection_info.data.qos_specs.read_iops_sec: 'lots' is not a non-negative integer"),
    (["render", "-"], local_with(logical_block_size=[512]), "logical_block_size"),
    (["render", "-", "--bus", "pci"], local_with(), "argument --bus: invalid choice"),
    (["render", "-", "--target-dev", "disk0"], local_with(), "is not a disk device name"),
    (["render", "-", "--attach-mode", "wo"], local_with(), "'wo' is not an attach mode"),
    (["render", "-", "--scsi-unit", "x"], local_with(), "'x' is not a unit number"),
    (["render", "-", "--multiattach"], "[1]", "is not a JSON object"),
    (["render", "/nonexistent.json"], None, "cannot read /nonexistent.json"),
    (["render"], None, "required: CONNECTION_INFO"),
    ([], None, "required: COMMAND"),
    (["frobnicate"], None, "invalid choice: 'frobnicate'"),
])
def test_bad_input_is_one_line_exit_2(args: list[str], stdin: str | None, message: str) -> None:
    assert message in one_line_error(run(*args, stdin=stdin))


def test_secrets_are_not_echoed_in_errors() -> None:
    info = json.loads((CI / "iscsi-multiattach.json").read_text())
    info["data"]["device_path"] = "relative"
    done = run("render", "-", stdin=json.dumps(info))
    one_line_error(done)
    assert info["data"]["auth_password"] not in done.stderr


def test_help_reads_like_virsh() -> None:
    done = run("render", "--help")
    assert done.returncode == 0 and "examples:" in done.stdout
