"""An attachment's own cache and error policies (#45, item 4), as rendered and as refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support import ROOT
from virtdriver import build_disk
from virtdriver.cli import main
from virtdriver.errors import InvalidRenderOption

LOCAL = json.loads((ROOT / "fixtures" / "connection_info" / "local.json").read_text())
SHARED = {**LOCAL, "multiattach": True}
SCSI: dict[str, Any] = {"bus": "scsi", "target_dev": "sdb"}


@pytest.mark.parametrize("info", [LOCAL, SHARED])
@pytest.mark.parametrize("cache", ["none", "directsync"])
def test_a_direct_cache_mode_is_kept_shared_or_not(info: dict, cache: str,
                                                   schema_valid) -> None:
    disk = build_disk(info, cache=cache, **SCSI)
    assert disk.driver is not None and disk.driver.cache == cache
    assert disk.driver.io in (None, "native")  # native stays: both modes bypass the page cache
    schema_valid(disk.to_xml())


@pytest.mark.parametrize("cache", ["writeback", "writethrough", "unsafe", "default", ""])
def test_a_cache_mode_that_uses_the_host_page_cache_is_refused(cache: str) -> None:
    with pytest.raises(InvalidRenderOption, match=r"^cache: .* is not one of none, directsync"):
        build_disk(SHARED, cache=cache, **SCSI)


@pytest.mark.parametrize(("write", "read"), [("stop", None), ("report", "stop"),
                                             ("ignore", "report"), ("enospace", "ignore")])
def test_error_policies_are_rendered(write: str, read: str | None, schema_valid) -> None:
    disk = build_disk(SHARED, error_policy=write, rerror_policy=read, **SCSI)
    assert disk.driver is not None
    assert (disk.driver.error_policy, disk.driver.rerror_policy) == (write, read)
    schema_valid(disk.to_xml())


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"error_policy": "pause"}, "error_policy: 'pause' is not one of stop, report"),
    ({"rerror_policy": "enospace"}, "rerror_policy: 'enospace' is not one of stop, report, "
                                    "ignore"),
])
def test_unknown_error_policies_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidRenderOption, match=message):
        build_disk(SHARED, **kwargs, **SCSI)


def test_a_lun_reports_errors_to_its_guest_unless_told_otherwise(schema_valid) -> None:
    lun = build_disk(SHARED, device="lun", **SCSI)
    assert lun.driver is not None and lun.driver.error_policy == "report"
    told = build_disk(SHARED, device="lun", error_policy="stop", **SCSI)
    assert told.driver is not None and told.driver.error_policy == "stop"
    disk = build_disk(SHARED, **SCSI)
    assert disk.driver is not None and disk.driver.error_policy is None  # libvirt's default
    for made in (lun, told, disk):
        schema_valid(made.to_xml())


def test_render_takes_the_options_attach_takes(tmp_path, capsys) -> None:
    doc = tmp_path / "volume.json"
    doc.write_text(json.dumps(LOCAL))
    assert main(["render", str(doc), "--multiattach", "--cache", "directsync", "--error-policy",
                 "report", "--rerror-policy", "ignore"]) == 0
    out = capsys.readouterr().out
    assert "cache='directsync'" in out and "error_policy='report'" in out
    assert "rerror_policy='ignore'" in out
