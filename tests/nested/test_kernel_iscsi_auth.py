"""iSCSI session authentication in the nested test host (issue #31): CHAP through the kernel
initiator, and QEMU's own initiator logging in as the host against a target whose ACL admits
the host's initiator name only.

tgt on 127.0.0.1:3260 (the fixture of test_kernel_iscsi) with an incoming CHAP account bound to
the target. The secrets are checked against every log line: the test's own capture of every
logger (virtdriver's, and os-brick's own output before virtdriver masks it), libvirt's and QEMU's
log files, and the system journal.
"""

from __future__ import annotations

import json
import logging
import secrets
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nested.test_kernel_iscsi import (  # noqa: F401 - fixtures
    BLOCK,
    IQN,
    lun_info,
    sessions,
    share_lun,
    tgt_lun,
    tgtadm,
    wait_until,
)

pytestmark = pytest.mark.kernel_initiator

USER = "vdchap"


class RawCapture(logging.Handler):
    """Every record os-brick and oslo emit, as they emit it (before virtdriver's masking)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(record.getMessage())
        except Exception:  # noqa: BLE001
            self.lines.append(str(record.msg))


@pytest.fixture
def raw_brick_log() -> Iterator[RawCapture]:
    handler = RawCapture()
    loggers = [logging.getLogger(n) for n in ("os_brick", "oslo_concurrency", "oslo_privsep",
                                              "oslo.privsep")]
    saved = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    yield handler
    for lg, level in zip(loggers, saved):
        lg.removeHandler(handler)
        lg.setLevel(level)


def chap_account(password: str) -> None:
    tgtadm("--mode", "account", "--op", "new", "--user", USER, "--password", password)
    tgtadm("--mode", "account", "--op", "bind", "--tid", "1", "--user", USER)


def iscsi_info(vid: str, password: str) -> dict:
    """The test LUN with CHAP as ``USER``."""
    return lun_info(vid, auth_method="CHAP", auth_username=USER, auth_password=password)


def logged_text(caplog: pytest.LogCaptureFixture, raw: RawCapture, state_dir: Path) -> str:
    """Every log line the run produced, from every place a log goes."""
    parts = [caplog.text, "\n".join(r.getMessage() for r in caplog.records), "\n".join(raw.lines)]
    for base in (Path("/var/log/libvirt"), state_dir):
        if base.is_dir():
            for f in base.rglob("*"):
                if f.is_file():
                    parts.append(f.read_text(errors="replace"))
    parts.append(subprocess.run(["journalctl", "-b", "--no-pager", "-o", "cat"],
                                capture_output=True, text=True, timeout=120).stdout)
    return "\n".join(parts)


def no_node_record() -> bool:
    return subprocess.run(["iscsiadm", "-m", "node", "-T", IQN], capture_output=True,
                          text=True).returncode != 0


def test_kernel_iscsi_chap(tgt_lun, guests, volume_driver, caplog, raw_brick_log) -> None:
    """A wrong CHAP secret is refused and leaves no session or node record; the right one logs
    in, the guest's writes reach the target, the last detach logs out; neither secret is in
    any log line."""
    from testhosts.guests import read_pattern, write_pattern
    from virtdriver.errors import VirtDriverError

    caplog.set_level(logging.DEBUG)
    password, wrong = secrets.token_hex(8), secrets.token_hex(8)
    chap_account(password)
    a, b = guests.start("a"), guests.start("b")
    vid = str(uuid.uuid4())
    with pytest.raises(VirtDriverError) as refused:
        volume_driver.attach_volume(iscsi_info(vid, wrong), a.name(), attach_mode="rw")
    assert IQN not in sessions()
    assert no_node_record()
    assert volume_driver.records.connected() == []
    assert wrong not in str(refused.value)

    info, vid, alias = share_lun(volume_driver, a, b, iscsi_info(vid, password))
    assert IQN in sessions()
    pattern = secrets.randbelow(200) + 20
    offset = secrets.randbelow(1000) * BLOCK
    write_pattern(a, alias, pattern, offset=offset)
    assert read_pattern(b, alias, pattern, offset=offset)
    with open(tgt_lun, "rb") as fh:
        fh.seek(offset)
        assert fh.read(BLOCK) == bytes([pattern]) * BLOCK
    listed = repr(volume_driver.list_attachments(a.name()))
    assert password not in listed
    volume_driver.detach_volume(a.name(), vid)
    assert IQN in sessions()
    volume_driver.detach_volume(b.name(), vid)
    wait_until(lambda: IQN not in sessions(), 30, "the iSCSI session gone after the last detach")
    assert no_node_record()

    assert any("iscsiadm" in line for line in raw_brick_log.lines), "os-brick logged nothing"
    assert any(r.name.startswith("virtdriver") for r in caplog.records)
    text = logged_text(caplog, raw_brick_log, volume_driver.state_dir)
    for secret in (password, wrong):
        hits = [ln for ln in text.splitlines() if secret in ln]
        assert hits == [], hits[:3]


# ---- QEMU's own initiator, logging in as the host -----------------------------------------------

WRONG_IQN = "iqn.2024-01.dev.virtdriver.nested:not-this-host"


@pytest.fixture
def acl_target(tgt_lun) -> Iterator[tuple[Path, str, str]]:
    """The target admits the host's initiator name only, with CHAP."""
    from virtdriver.driver.options import host_initiator_name

    host_iqn = host_initiator_name()
    assert host_iqn, "the nested host has no /etc/iscsi/initiatorname.iscsi"
    # tgt admits an initiator that its address ACL or its name ACL lets in (with ALL bound, any
    # name got in): the address ACL is emptied, the name ACL holds the host's name only.
    tgtadm("--mode", "target", "--op", "unbind", "--tid", "1", "-I", "ALL")
    tgtadm("--mode", "target", "--op", "bind", "--tid", "1", "--initiator-name", host_iqn)
    password = secrets.token_hex(8)
    chap_account(password)
    shown = tgtadm("--mode", "target", "--op", "show")
    assert host_iqn in shown.split("ACL information:")[1], shown
    yield tgt_lun, host_iqn, password


def test_native_iscsi_logs_in_as_the_host(acl_target, guests, tmp_path, caplog,
                                          raw_brick_log) -> None:
    """Through the API: the default (host's) name and an operator-named one (the same name,
    given with ``initiator_iqn``) see the LUN; a name the ACL does not admit is refused by the
    target, and the error names the initiator QEMU logged in as."""
    from testhosts.guests import block_info, read_pattern, write_pattern
    from virtdriver import LibvirtVolumeDriver
    from virtdriver.errors import AttachFailed

    caplog.set_level(logging.DEBUG)
    backing, host_iqn, password = acl_target
    a = guests.start("a")
    alias_of = "ua-{}".format
    for name, iqn in (("default", None), ("named", host_iqn)):
        driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / name,
                                     native_iscsi=True, initiator_iqn=iqn, detach_timeout=20)
        try:
            vid = str(uuid.uuid4())
            driver.attach_volume(iscsi_info(vid, password), a.name(), attach_mode="rw")
            xml = a.XMLDesc(0)
            assert f"<iqn name='{host_iqn}'/>" in xml or f'<iqn name="{host_iqn}"/>' in xml, xml
            assert block_info(a, alias_of(vid)).raw["inserted"]["image"]["virtual-size"] \
                == 64 << 20
            pattern = secrets.randbelow(200) + 20
            offset = secrets.randbelow(1000) * BLOCK
            write_pattern(a, alias_of(vid), pattern, offset=offset)
            assert read_pattern(a, alias_of(vid), pattern, offset=offset)
            with open(backing, "rb") as fh:
                fh.seek(offset)
                assert fh.read(BLOCK) == bytes([pattern]) * BLOCK
            assert IQN not in sessions()  # QEMU's own login, not the kernel's
            driver.detach_volume(a.name(), vid)
        finally:
            driver.close()

    driver = LibvirtVolumeDriver("qemu:///system", state_dir=tmp_path / "wrong",
                                 native_iscsi=True, initiator_iqn=WRONG_IQN, detach_timeout=20)
    try:
        vid = str(uuid.uuid4())
        with pytest.raises(AttachFailed) as refused:
            driver.attach_volume(iscsi_info(vid, password), a.name(), attach_mode="rw")
        message = str(refused.value)
        assert WRONG_IQN in message and "the target must admit that name" in message, message
        assert password not in message
        assert alias_of(vid) not in a.XMLDesc(0)
    finally:
        driver.close()
    text = logged_text(caplog, raw_brick_log, tmp_path)
    assert [ln for ln in text.splitlines() if password in ln] == []


def test_native_iscsi_cli_logs_in_as_the_host(acl_target, guests, tmp_path) -> None:
    """``virtdriver attach --native-iscsi`` (default name, then ``--initiator-iqn``), and a
    wrong ``--initiator-iqn`` refused with the name in the message. One CLI process per case."""
    _backing, host_iqn, password = acl_target
    a = guests.start("a")
    env_py = "/opt/vd/venv/bin/python"

    def cli(*argv: str, info: dict | None = None) -> subprocess.CompletedProcess:
        extra = []
        if info is not None:
            path = tmp_path / f"{uuid.uuid4()}.json"
            path.write_text(json.dumps(info))
            extra = [str(path)]
        # CONNECTION_INFO right after DOMAIN: argparse takes an optional positional only there
        command, domain, *flags = argv
        return subprocess.run([env_py, "-m", "virtdriver", "--state-dir", str(tmp_path / "st"),
                               command, domain, *extra, *flags], capture_output=True,
                              text=True, timeout=600)

    for extra in ((), ("--initiator-iqn", host_iqn)):
        vid = str(uuid.uuid4())
        done = cli("attach", a.name(), "--native-iscsi", *extra,
                   info=iscsi_info(vid, password))
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"ua-{vid}" in a.XMLDesc(0)
        assert host_iqn in a.XMLDesc(0)
        assert password not in done.stdout + done.stderr
        done = cli("detach", a.name(), vid)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"ua-{vid}" not in a.XMLDesc(0)
    vid = str(uuid.uuid4())
    done = cli("attach", a.name(), "--native-iscsi", "--initiator-iqn", WRONG_IQN,
               info=iscsi_info(vid, password))
    assert done.returncode != 0
    assert WRONG_IQN in done.stderr and "the target must admit that name" in done.stderr, \
        done.stderr
    assert password not in done.stdout + done.stderr
    assert f"ua-{vid}" not in a.XMLDesc(0)
