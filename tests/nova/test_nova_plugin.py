"""A protocol added as one module and one entry point reaches nova through virtdriver (#29).

``tests/plugins/vd_testfs`` is installed as a distribution of its own (module, dist-info, entry
point) and declares, in its module only, the nova class it stands on. In a fresh nova process,
nova's own compute driver code (``virtdriver.nova.LibvirtDriver``, nova's ``_get_volume_driver``
lookup through its ``VOLUME_DRIVERS`` table) finds a derived adapter for ``testfs``, and that
adapter's ``get_config`` is virtdriver's rendering: the multiattach disk is ``<shareable/>``,
a read-only attachment is ``<readonly/>``. Nothing in ``virtdriver/nova/`` names the protocol.

Needs nova 34 (``scripts/nova-suite.sh`` runs tests/nova in its venv) and libvirtd (nova's
``Host`` looks up an encryption secret, as for every volume).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("nova.conf", reason="needs nova 34; scripts/nova-suite.sh runs it in its venv")

pytestmark = pytest.mark.hypervisor

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.host.test_plugin_protocol import install  # noqa: E402

NOVA_PROCESS = r"""
import json, sys
import libvirt
from nova.virt import fake
from nova.virt.libvirt import driver as nova_driver
from virtdriver.nova import LibvirtDriver, NOVA_DRIVER_CLASSES, VirtdriverRendering

libvirt.registerErrorHandler(lambda _ctx, _err: None, None)  # "no such secret" is expected
compute = LibvirtDriver(fake.FakeVirtAPI(), False)
out = {"table": nova_driver.VOLUME_DRIVERS.get("testfs"), "xml": {}}
for mode in ("rw", "ro"):
    info = {"driver_volume_type": "testfs", "serial": "6b0c2a52-4a2c-4a8e-9d0e-3c3b5e1f0a11",
            "multiattach": True,
            "data": {"volume_id": "6b0c2a52-4a2c-4a8e-9d0e-3c3b5e1f0a11", "access_mode": mode,
                     "device_path": "/mnt/testfs/share/volume-6b0c2a52"}}
    vol_driver = compute._get_volume_driver(info)
    out["class"] = type(vol_driver).__module__ + "." + type(vol_driver).__name__
    out["nova_base"] = [c.__module__ + "." + c.__name__ for c in type(vol_driver).__mro__]
    out["rendering"] = isinstance(vol_driver, VirtdriverRendering)
    out["same_instance"] = compute._get_volume_driver(info) is vol_driver
    conf = vol_driver.get_config(info, {"bus": "virtio", "dev": "vdb", "type": "disk"})
    out["xml"][mode] = conf.to_xml()
out["in_classes"] = out["table"] in NOVA_DRIVER_CLASSES
json.dump(out, sys.stdout)
"""


def in_nova(code: str, cwd: Path, env: dict[str, str] | None = None) -> Any:
    """``code`` run in a fresh nova process (nova's ``Host`` needs libvirtd); its JSON output."""
    if not os.path.exists("/var/run/libvirt/libvirt-sock"):
        pytest.skip("libvirtd is not running (./scripts/setup-host.sh starts it)")
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_a_plugin_protocol_reaches_nova_through_a_derived_adapter(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    install(site)
    path = [str(site), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))
    out = in_nova(NOVA_PROCESS, tmp_path, env)
    assert out["table"] == "virtdriver.nova.adapters.TestFsVolumeDriver"
    assert out["class"] == out["table"]
    assert out["in_classes"] and out["rendering"] and out["same_instance"]
    assert "nova.virt.libvirt.volume.volume.LibvirtVolumeDriver" in out["nova_base"]
    rw, ro = out["xml"]["rw"], out["xml"]["ro"]
    for xml in (rw, ro):
        assert "<source file=\"/mnt/testfs/share/volume-6b0c2a52\"/>" in xml
        assert "<shareable/>" in xml
        assert "<serial>6b0c2a52-4a2c-4a8e-9d0e-3c3b5e1f0a11</serial>" in xml
    assert "<readonly/>" in ro and "<readonly/>" not in rw


def test_virtdriver_nova_names_no_protocol() -> None:
    """The adapters are derived: virtdriver/nova/ names no protocol module or protocol class."""
    nova_dir = ROOT / "virtdriver" / "nova"
    text = "\n".join(p.read_text() for p in sorted(nova_dir.glob("*.py")))
    assert "virtdriver.volume." + "iscsi" not in text
    for name in ("iscsi", "nfs", "testfs", "rbd"):
        assert f'volume_type = "{name}"' not in text


EVERY_TYPE_PROCESS = r"""
import json, sys
import libvirt
from nova.virt import fake
from nova.virt.libvirt import driver as nova_driver
from virtdriver.nova import LibvirtDriver, NOVA_DRIVER_CLASSES

libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
compute = LibvirtDriver(fake.FakeVirtAPI(), False)
out = {}
for volume_type, path in sorted(nova_driver.VOLUME_DRIVERS.items()):
    try:
        got = type(compute._get_volume_driver({"driver_volume_type": volume_type}))
    except Exception:  # nova's VolumeDriverNotSupported, or a connector that cannot start on
        got = None         # this host (StorPool's missing config, NVMe's missing module)
    out[volume_type] = {"adapter": NOVA_DRIVER_CLASSES.get(path).__name__
                        if path in NOVA_DRIVER_CLASSES else None,
                        "got": got.__name__ if got is not None else None}
json.dump(out, sys.stdout)
"""


def test_every_type_nova_names_is_served_by_its_adapter(tmp_path: Path) -> None:
    """nova's lookup (its table, its import) hands out the adapter for every type virtdriver
    adapts, including those whose adapter carries a nova class's own defaults (rbd: nova's net
    driver with ``[libvirt] rbd_*``); nova's functional suite found rbd served by nova's own
    driver when that lookup took the defaults mixin for the nova class."""
    out = in_nova(EVERY_TYPE_PROCESS, tmp_path)
    adapted = {t: row for t, row in out.items() if row["adapter"] is not None}
    assert {"rbd", "iscsi", "nfs", "local"} <= set(adapted)
    wrong = {t: row for t, row in adapted.items() if row["got"] not in (row["adapter"], None)}
    assert not wrong, wrong
    for volume_type in ("rbd", "iscsi", "nfs", "local"):  # connectors every host can start
        assert adapted[volume_type]["got"] == adapted[volume_type]["adapter"], volume_type
    assert adapted["rbd"]["got"] == "RBDVolumeDriver"
