"""Tests that run only inside the nested test host (``scripts/test-nested.sh``).

The host's own pytest run never collects this directory (``tests/conftest.py`` ignores it unless
``VIRTDRIVER_NESTED`` is set, as the VM's runner does). Inside the VM nothing here is skipped:

* every test carries one of the markers ``lsm_selinux``, ``lsm_apparmor`` or
  ``kernel_initiator`` (a test with none is a collection error);
* the tests of the *other* LSM are deselected (pytest reports them as deselected, not skipped);
* ``kernel_initiator`` tests run in the SELinux boot only (#57). The AppArmor boot runs the label
  tests: libvirt's virt-aa-helper adds a block device to each guest's profile by its path, the same
  for a loop device (test_apparmor.py) as for an iSCSI, multipath or NVMe one, and what the
  initiator does is the same under both LSMs;
* a test that skips anyway is reported as failed: the nested host exists to run them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import libvirt
import pytest

#: selinux | apparmor (set by testhosts/nested/guest-run.sh), None on an ordinary host.
NESTED = os.environ.get("VIRTDRIVER_NESTED") or None
LSM_MARKERS = {"selinux": "lsm_selinux", "apparmor": "lsm_apparmor"}
MARKERS = {*LSM_MARKERS.values(), "kernel_initiator"}
#: the boot that runs every ``kernel_initiator`` test
KERNEL_INITIATOR_BOOT = "selinux"
HERE = Path(__file__).resolve().parent


def _in_here(item: pytest.Item) -> bool:
    return HERE in Path(str(item.path)).resolve().parents


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if NESTED not in LSM_MARKERS:
        raise pytest.UsageError(
            "tests/nested runs inside the nested test host only: scripts/test-nested.sh --lsm "
            f"selinux|apparmor (VIRTDRIVER_NESTED is {NESTED!r})")
    keep, drop = [], []
    for item in items:
        if not _in_here(item):
            keep.append(item)
            continue
        names = {m.name for m in item.iter_markers()}
        if not names & MARKERS:
            raise pytest.UsageError(f"{item.nodeid} carries none of the markers {sorted(MARKERS)}")
        # A test marked for both LSMs runs in both modes. A kernel initiator test runs in the
        # SELinux boot, and in the AppArmor boot only when it is also marked lsm_apparmor (none is
        # now: what the initiator does is the same under both; CI's time goes to what differs).
        here = LSM_MARKERS[NESTED] in names or (
            "kernel_initiator" in names and NESTED == KERNEL_INITIATOR_BOOT)
        (keep if here else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and _in_here(item) and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = ("skipped inside the nested test host, where every test must run: "
                           f"{reason}")


# ---- helpers shared by the LSM tests ------------------------------------------------------------

def stop_tgtd(proc: subprocess.Popen[bytes]) -> None:
    """Stop a test's tgtd: it ignores SIGTERM, so tgtadm asks it to end itself."""
    subprocess.run(["tgtadm", "--lld", "iscsi", "--mode", "system", "--op", "delete"],
                   capture_output=True)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


def run(*argv: str, check: bool = True) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {done.returncode}: "
                             f"{done.stdout}{done.stderr}")
    return done.stdout


def qemu_pid(dom: libvirt.virDomain) -> int:
    """The pid of ``dom``'s QEMU process (libvirt's pid file of a qemu:///system guest)."""
    return int(Path("/run/libvirt/qemu", f"{dom.name()}.pid").read_text().strip())


def secmodels(conn: libvirt.virConnect) -> list[str]:
    """The security models libvirt uses, from its capabilities, in order."""
    from lxml import etree

    caps = etree.fromstring(conn.getCapabilities().encode())
    return [m.text for m in caps.findall("./host/secmodel/model")]


@dataclass(frozen=True)
class AuditRecord:
    line: str

    @property
    def permissive(self) -> bool:
        return "permissive=1" in self.line

    @property
    def stamp(self) -> float | None:
        """The kernel's time of the record (``msg=audit(SECONDS.MILLIS:SERIAL)``)."""
        found = _AUDIT_STAMP.search(self.line)
        return float(found.group(1)) if found else None


_AUDIT_STAMP = re.compile(r"msg=audit\((\d+\.\d+):\d+\)")


@dataclass
class AuditWindow:
    """Audit records of one kind appended to the audit log while a test ran.

    ``ausearch -m TYPES -ts START`` (the time is taken a second early: ausearch has second
    resolution), cross-checked against the raw log appended since the start.
    """

    types: str
    start_wall: float
    log_offset: int

    def records(self) -> list[AuditRecord]:
        stamp = time.localtime(self.start_wall - 1)
        env = dict(os.environ, LC_ALL="C")
        done = subprocess.run(
            ["ausearch", "-m", self.types, "-ts", time.strftime("%x", stamp),
             time.strftime("%H:%M:%S", stamp)], capture_output=True, text=True, env=env,
            timeout=120)
        if done.returncode not in (0, 1) or (done.returncode == 1 and "no matches" not in
                                             done.stderr):
            raise AssertionError(f"ausearch failed ({done.returncode}): {done.stderr}")
        # ausearch prints whole events: keep the records of the asked types only (not the
        # SYSCALL and PROCTITLE records that come with them).
        wanted = tuple(f"type={t} " for t in self.types.split(","))
        found = [AuditRecord(ln) for ln in done.stdout.splitlines() if ln.startswith(wanted)]
        with open("/var/log/audit/audit.log", errors="replace") as fh:
            fh.seek(self.log_offset)
            raw = [ln for ln in fh.read().splitlines() if ln.startswith(wanted)]
        # Both views must agree that nothing was missed (ausearch is what the brief names; the
        # raw log guards against a time-format mistake that would make it see nothing).
        seen = {r.line for r in found}
        # ausearch starts a second early: drop what the kernel stamped before the window opened
        # (a test that opens a second window after provoking a denial must not see it again).
        return [r for r in found + [AuditRecord(ln) for ln in raw if ln not in seen]
                if r.stamp is None or r.stamp >= self.start_wall]


@pytest.fixture
def audit_window(request: pytest.FixtureRequest) -> AuditWindow:
    # AppArmor's kernel messages (DENIED, STATUS) are AVC records too while auditd runs.
    types = "AVC,USER_AVC,SELINUX_ERR" if NESTED == "selinux" else "AVC,USER_AVC"
    if run("pidof", "auditd", check=False).strip() == "":
        raise AssertionError("auditd is not running: denials would go unseen")
    log = Path("/var/log/audit/audit.log")
    return AuditWindow(types, time.time(), log.stat().st_size)


def aa_status() -> dict:
    return json.loads(run("aa-status", "--json"))


def split_context(context: str) -> tuple[str, str, str, str]:
    """user, role, type, level of an SELinux context (the level keeps its colons)."""
    user, role, typ, level = context.strip().split(":", 3)
    return user, role, typ, level


MCS_PAIR = re.compile(r"s0:c(\d+),c(\d+)")


#: Where tests write what they observed (facts for the docs), collected with the results.
OBSERVED = Path("/results/observed.txt")


def observe(test: str, name: str, value: object) -> None:
    """Record an observed fact of ``test`` in the nested host's results (``observed.txt``)."""
    if OBSERVED.parent.is_dir():
        with OBSERVED.open("a") as fh:
            fh.write(f"{test}: {name}: {value}\n")
