"""Golden pairs: fixtures/disk/<case>.json renders exactly fixtures/disk/<case>.xml.

Regenerate after an intended change with ``VIRTDRIVER_REGENERATE_GOLDEN=1 scripts/test.sh
tests/fast/test_render_golden.py`` and review the diff: golden files are never accepted blindly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from virtdriver.config import Disk
from virtdriver.render import build_disk

CASES = sorted((FIXTURES / "disk").glob("*.json"))
REGENERATE = os.environ.get("VIRTDRIVER_REGENERATE_GOLDEN") == "1"


def render(case: Path) -> str:
    spec = json.loads(case.read_text())
    return build_disk(spec["connection_info"], **spec["options"]).to_xml()


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_renders_golden_xml(case: Path, schema_valid) -> None:
    xml = render(case)
    golden = case.with_suffix(".xml")
    if REGENERATE:
        golden.write_text(xml + "\n")
    assert xml == golden.read_text().rstrip("\n")
    schema_valid(xml)
    assert Disk.from_xml(xml).to_xml() == xml


def test_every_volume_type_has_all_four_modes() -> None:
    from virtdriver.volume import known_types

    names = {case.stem for case in CASES}
    for volume_type in known_types():
        for variant in ("rw", "ro", "multiattach-rw", "multiattach-ro"):
            assert f"{volume_type}-{variant}" in names


def test_secrets_never_reach_the_xml() -> None:
    for case in CASES:
        assert "chap-secret-never-logged" not in render(case)
