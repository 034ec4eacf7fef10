"""Every shape of connection_info Cinder and nova send has one meaning (virtdriver.shapes)."""

from __future__ import annotations

import pytest

from virtdriver.errors import InvalidAttachMode, InvalidConnectionInfo
from virtdriver.render import build_disk
from virtdriver.shapes import normalize

VID = "0d3f2c1e-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
FLAT = {"driver_volume_type": "rbd", "name": f"volumes/volume-{VID}", "hosts": ["127.0.0.1"],
        "ports": ["6789"], "cluster_name": "ceph", "auth_enabled": True,
        "auth_username": "volumes", "secret_type": "ceph",
        "secret_uuid": "6a1f9a4e-2c3b-4d5e-8f70-91a2b3c4d5e6", "volume_id": VID,
        "discard": True, "qos_specs": None, "access_mode": "rw", "encrypted": False,
        "cacheable": False, "enforce_multipath": False,
        "attachment_id": "9b8a7c6d-1e2f-4a3b-8c4d-5e6f7a8b9c0d"}


def shapes(flat: dict, mode: str) -> dict[str, object]:
    inner = {"id": flat["attachment_id"], "volume_id": VID, "status": "reserved",
             "attach_mode": mode, "instance": None, "attached_at": None, "detached_at": None,
             "connection_info": flat}
    return {"flat": flat, "record": {"attachment": inner}, "inner": inner,
            "nova": {"driver_volume_type": "rbd", "data": flat, "serial": VID},
            "legacy": {"driver_volume_type": "rbd",
                       "data": {k: v for k, v in flat.items() if k != "driver_volume_type"}}}


def test_every_shape_renders_the_same_disk() -> None:
    rendered = {name: build_disk(doc, attach_mode="rw").to_xml()
                for name, doc in shapes(FLAT, "rw").items()}
    assert len(set(rendered.values())) == 1, rendered
    assert f"<serial>{VID}</serial>" in rendered["flat"]
    assert "discard='unmap'" in rendered["flat"]


def test_the_records_mode_is_the_attach_mode() -> None:
    for name in ("record", "inner"):
        doc = shapes(FLAT, "ro")[name]
        assert "<readonly/>" in build_disk(doc).to_xml()
        assert normalize(doc)[1] == "ro"
        assert normalize(doc, "ro")[1] == "ro"
        with pytest.raises(InvalidAttachMode, match="contradicts"):
            build_disk(doc, attach_mode="rw")
    assert "<readonly/>" not in build_disk(FLAT).to_xml()  # Cinder's access_mode is always rw
    for name in ("record", "inner"):  # read-only wins: ro narrows a record's rw
        doc = shapes(FLAT, "rw")[name]
        assert normalize(doc, "ro")[1] == "ro"
        assert "<readonly/>" in build_disk(doc, attach_mode="ro").to_xml()


def test_normalize_leaves_its_input_alone_and_is_idempotent() -> None:
    doc = shapes(FLAT, "ro")["record"]
    info, mode = normalize(doc)
    assert "data" not in FLAT and "serial" not in FLAT
    assert normalize(info, mode) == (info, mode)


@pytest.mark.parametrize("doc, where", [
    ({"attachment": []}, "attachment: is not a JSON object"),
    ({"attachment": {"connection_info": None}}, "attachment.connection_info: is missing"),
    ({"connection_info": {}, "attach_mode": "wo"}, "attach_mode: 'wo' is not"),
    ({"driver_volume_type": "rbd"}, "connection_info.data: is missing"),
    ({"driver_volume_type": "rbd", "data": 3}, "connection_info.data: is missing"),
])
def test_bad_shapes_name_the_key(doc: object, where: str) -> None:
    with pytest.raises(InvalidConnectionInfo, match=where):
        normalize(doc)


def test_the_cli_reads_every_shape(tmp_path, capsys) -> None:
    import json

    from virtdriver.cli import main

    outputs = []
    for name, doc in shapes(FLAT, "ro").items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc))
        assert main(["render", str(path), "--attach-mode", "ro"]) == 0, name
        outputs.append(capsys.readouterr().out)
    assert len(set(outputs)) == 1 and "<readonly/>" in outputs[0]
    record = tmp_path / "record.json"
    assert main(["render", str(record)]) == 0
    assert "<readonly/>" in capsys.readouterr().out  # the record's own mode
    assert main(["render", str(record), "--attach-mode", "rw"]) == 2
    assert "contradicts" in capsys.readouterr().err
