"""The command line: exit codes, one-line errors, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import FIXTURES

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


# ---- every way the environment or the input can fail is one line, never a traceback ------------

def run_bytes(*args: str | bytes, stdin: bytes | None = b"", env: dict[str, str] | None = None,
              **kw: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "virtdriver", *args], input=stdin,
                          capture_output=True, check=False, env=env, timeout=60, **kw)


def one_line_error_bytes(done: subprocess.CompletedProcess[bytes]) -> str:
    err = done.stderr.decode("utf-8")
    assert done.returncode == 2, err
    assert done.stdout == b"" and "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("virtdriver: error: "), err
    assert lines[0].isprintable(), "control characters are never echoed to the terminal"
    return lines[0]


HUGE = "9" * 5000


@pytest.mark.parametrize("data, key", [
    ({"qos_specs": {"read_iops_sec": HUGE}}, "read_iops_sec"),
    ({"logical_block_size": HUGE}, "logical_block_size"),
    ({"qos_specs": {"read_iops_sec": str(2**64)}}, "read_iops_sec"),
    ({"qos_specs": {"read_iops_sec": 2**64}}, "read_iops_sec"),
    ({"qos_specs": {"read_iops_sec": 10**15 + 1}}, "read_iops_sec"),
    ({"qos_specs": {"read_iops_sec": 10, "read_iops_sec_max": 10**9,
                    "read_iops_sec_max_length": 10**7}}, "read_iops_sec_max_length"),
    ({"qos_specs": {"read_bytes_sec": 10, "size_iops_sec": 4096}}, "size_iops_sec"),
    ({"device_path": "/dev/x\udcff"}, "device_path"),
    ({"device_path": "/dev/x\ud800"}, "device_path"),
    ({"encrypted": "true"}, "encrypted"),
    ({"discard": "false"}, "discard"),
    ({"logical_block_size": 4096}, "logical_block_size"),
])
def test_values_beyond_what_libvirt_or_qemu_take_are_one_line(data: dict, key: str) -> None:
    text = local_with(**data).replace(json.dumps("\udcff")[1:-1], "\\udcff")
    line = one_line_error_bytes(run_bytes("render", "-",
                                          stdin=text.encode("utf-8", "surrogatepass")))
    assert key in line


@pytest.mark.parametrize("number", [HUGE, "-" + HUGE, HUGE + ".5e3"])
def test_a_json_number_longer_than_python_converts_is_one_line(number: str) -> None:
    stdin = ('{"driver_volume_type": "local", "data": {"device_path": "/dev/loop1", '
             f'"qos_specs": {{"read_iops_sec": {number}}}}}}}').encode()
    one_line_error_bytes(run_bytes("render", "-", stdin=stdin))


def test_rbd_flags_and_hosts_must_have_their_types() -> None:
    rbd = json.loads((CI / "rbd.json").read_text())
    for key, value in (("auth_enabled", "false"), ("auth_enabled", 1), ("hosts", []),
                       ("hosts", "192.0.2.10"), ("hosts", {})):
        info = json.loads(json.dumps(rbd))
        info["data"][key] = value
        if key == "hosts":
            info["data"].pop("ports")
        assert f"data.{key}" in one_line_error_bytes(
            run_bytes("render", "-", stdin=json.dumps(info).encode()))


def test_closed_stdin_is_one_line() -> None:
    done = subprocess.run([sys.executable, "-m", "virtdriver", "render", "-"], stdin=None,
                          capture_output=True, check=False, timeout=60,
                          preexec_fn=lambda: os.close(0))
    assert "standard input is closed" in one_line_error_bytes(done)


def test_closed_stdout_is_one_line() -> None:
    done = subprocess.run([sys.executable, "-m", "virtdriver", "render", str(CI / "local.json")],
                          stderr=subprocess.PIPE, check=False, timeout=60,
                          preexec_fn=lambda: os.close(1))
    assert done.returncode == 2
    assert done.stderr.decode() == "virtdriver: error: standard output is closed\n"


def test_a_reader_that_went_away_is_one_line() -> None:
    """``virtdriver render ... | head -c0``: the pipe's reader is gone before the XML is
    written."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "virtdriver", "render",
                               str(CI / "local.json")], stdout=write_end, stderr=subprocess.PIPE,
                              check=False, timeout=60)
    finally:
        os.close(write_end)
    assert done.returncode == 2
    assert done.stderr.decode() == "virtdriver: error: standard output is closed\n"


def test_a_non_utf8_stdout_gets_the_same_xml(schema_valid) -> None:
    info = local_with(device_path="/dev/disk/by-id/caf\u00e9-\u2603")
    env = dict(os.environ, PYTHONIOENCODING="ascii")
    done = run_bytes("render", "-", stdin=info.encode(), env=env)
    assert done.returncode == 0 and done.stderr == b""
    xml = done.stdout.decode("ascii")
    schema_valid(xml)
    from virtdriver.config import Disk
    assert Disk.from_xml(xml).source.dev == "/dev/disk/by-id/caf\u00e9-\u2603"


def test_a_bom_and_non_utf8_get_one_explanation_from_file_and_stdin(tmp_path) -> None:
    good = (CI / "local.json").read_bytes()
    with_bom = tmp_path / "bom.json"
    with_bom.write_bytes(b"\xef\xbb\xbf" + good)
    assert run_bytes("render", str(with_bom)).stdout == run_bytes("render", "-", stdin=good).stdout
    assert run_bytes("render", "-", stdin=b"\xef\xbb\xbf" + good).returncode == 0
    for bad in (b"\xff\xfe{\x00}\x00", b'{"data": "\xe9"}', b"\xef\xbb\xbf\xff"):
        path = tmp_path / "bad.json"
        path.write_bytes(bad)
        from_file = one_line_error_bytes(run_bytes("render", str(path)))
        from_stdin = one_line_error_bytes(run_bytes("render", "-", stdin=bad))
        assert from_file.replace(str(path), "standard input") == from_stdin
        assert "not UTF-8 text" in from_stdin


@pytest.mark.parametrize("name", [b"/tmp/\x1b[31mred\x1b[0m.json", b"/tmp/\x9b2J", b"/tmp/\xff",
                                  b"/tmp/a\nb"])
def test_file_names_are_not_echoed_with_control_characters(name: bytes) -> None:
    line = one_line_error_bytes(run_bytes("render", name))
    assert "\x1b" not in line and "cannot read" in line


# A host whose libvirt does not answer: render writes labels for every security driver.
NO_HOST = ["-c", "qemu+unix:///system?socket=/nonexistent/libvirt-sock"]


def test_control_characters_in_options_are_refused() -> None:
    nfs = json.dumps({"driver_volume_type": "nfs",
                      "data": {"export": "192.0.2.5:/e", "name": "volume-1"}}).encode()
    for args in (["--mount-base", "/mnt/a\tb"], ["--mount-base", "/mnt/\x1b[2J"],
                 ["--mount-base", "/mnt/\x85"], ["--label-policy", "explicit",
                                                "--shared-image-label", "a\u2028b"]):
        line = one_line_error_bytes(run_bytes(*NO_HOST, "render", "-", *args, stdin=nfs))
        assert "mount_base" in line or "shared_image_label" in line
    line = one_line_error_bytes(run_bytes("render", "-", "--mount-base", b"/mnt/\xff", stdin=nfs))
    assert "mount_base" in line


def test_nfs_without_mount_base_names_the_option() -> None:
    nfs = json.dumps({"driver_volume_type": "nfs",
                      "data": {"export": "192.0.2.5:/e", "name": "volume-1"}}).encode()
    assert "--mount-base" in one_line_error_bytes(run_bytes("render", "-", stdin=nfs))


def test_shared_image_label_without_explicit_label_policy_is_refused() -> None:
    for policy in ([], ["--label-policy", "auto"], ["--label-policy", "none"]):
        line = one_line_error_bytes(run_bytes("render", str(CI / "local.json"), *policy,
                                              "--shared-image-label", "system_u:x:y:s0"))
        assert "--label-policy explicit" in line
    ok = run_bytes(*NO_HOST, "render", str(CI / "local.json"), "--multiattach", "--label-policy",
                   "explicit", "--shared-image-label", "system_u:object_r:svirt_image_t:s0")
    assert ok.returncode == 0 and b"svirt_image_t" in ok.stdout


@pytest.mark.parametrize("bus", ["ide", "sata"])
def test_render_does_not_offer_a_bus_attach_cannot_hot_plug(bus: str) -> None:
    line = one_line_error_bytes(run_bytes("render", str(CI / "local.json"), "--bus", bus))
    assert "--bus" in line and "hot-plugged" in line
