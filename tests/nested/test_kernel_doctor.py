"""``virtdriver doctor`` on the nested test host, whose kernel has every initiator (issue #31):
it reports iscsid and the initiator name, the host NQN, multipathd and whether virtdriver will
use it, the kernel modules, os-brick's version, and says OK for kernel iSCSI and NVMe-oF (which
the other kernel_initiator tests attach for real on this host). Its not-OK answers on a kernel
without them are tests/fast/test_doctor_initiators.py, on the machine that runs this VM.
"""

from __future__ import annotations

import json
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.nested.conftest import run
from tests.nested.test_kernel_multipath import multipathd  # noqa: F401 - fixture

pytestmark = pytest.mark.kernel_initiator

PY = "/opt/vd/venv/bin/python"


def doctor(state: Path, *flags: str) -> dict:
    done = subprocess.run([PY, "-m", "virtdriver", "--state-dir", str(state), "doctor", "--json",
                           *flags], capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return json.loads(done.stdout)


def checks(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


def file_value(path: str, key: str | None = None) -> str:
    text = Path(path).read_text()
    if key is None:
        return text.strip()
    return next(ln.split("=", 1)[1].strip() for ln in text.splitlines()
                if ln.strip().startswith(key + "="))


def test_doctor_on_a_host_with_every_initiator(multipathd, tmp_path: Path) -> None:
    for module in ("iscsi_tcp", "nvme_tcp", "dm_multipath"):
        run("modprobe", module)
    iqn = file_value("/etc/iscsi/initiatorname.iscsi", "InitiatorName")
    nqn = file_value("/etc/nvme/hostnqn")

    report = doctor(tmp_path / "a", "--multipath")
    found = checks(report)
    facts = report["facts"]["initiators"]
    assert found["iscsid"]["status"] == "ok", found["iscsid"]
    assert iqn in found["iscsid"]["detail"] and facts["initiator_name"] == iqn
    assert facts["iscsid"] in ("running", "socket")
    assert found["host nqn"]["status"] == "ok" and nqn in found["host nqn"]["detail"]
    assert found["multipathd"]["status"] == "ok", found["multipathd"]
    assert "multipathd running" in found["multipathd"]["detail"]
    assert "gives guests the multipath device" in found["multipathd"]["detail"]
    assert found["kernel modules"] == {
        "area": "initiators", "name": "kernel modules", "status": "ok",
        "detail": "iscsi_tcp loaded, nvme_tcp loaded, dm_multipath loaded"}
    brick = version("os-brick")
    assert found["os-brick"]["status"] == "ok" and f"os-brick {brick}" in \
        found["os-brick"]["detail"]
    for protocol in ("iscsi", "nvmeof"):
        assert found[protocol]["status"] == "ok", found[protocol]
        assert found[protocol]["detail"].startswith("host: yes"), found[protocol]

    # without --multipath: multipathd runs, virtdriver will not use it
    plain = checks(doctor(tmp_path / "b"))["multipathd"]
    assert plain["status"] == "ok" and "virtdriver will not use it" in plain["detail"]

    # multipathd stopped: --multipath falls back to one path; --enforce-multipath cannot attach
    subprocess.run(["systemctl", "stop", "multipathd.service", "multipathd.socket"],
                   capture_output=True, check=True)
    fallback = checks(doctor(tmp_path / "c", "--multipath"))["multipathd"]
    assert fallback["status"] == "warn" and "falls back to one path" in fallback["detail"]
    enforced = doctor(tmp_path / "d", "--multipath", "--enforce-multipath")
    assert checks(enforced)["multipathd"]["status"] == "fail"
    assert enforced["multiattach"] is False
