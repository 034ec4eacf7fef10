"""nova's own drivers' results, kept by their inputs: the baseline does not involve virtdriver.

A baseline run (nova's own drivers on nova's own tests) depends only on nova's venv, the Python
running it and the suite scripts in this folder. Its report is kept under the venv
(``baselines/KEY.json``) and reused while those inputs stay the same; ``VD_NOVA_BASELINE=run``
runs it again regardless. Run in the nova venv (see ``scripts/nova-suite.sh``).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KEPT = Path(os.environ.get("VD_NOVA_BASELINES", Path(sys.prefix) / "baselines"))


def key(name: str, *args: str) -> str:
    """The inputs of one baseline run: its name and arguments, Python, the venv, this folder."""
    digest = hashlib.sha256()
    packages = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions()
                      if d.metadata["Name"] and d.metadata["Name"].lower() != "virtdriver")
    for part in (name, *args, sys.version, *packages):
        digest.update(part.encode() + b"\0")
    for script in sorted(HERE.glob("*.py")):
        digest.update(script.name.encode() + b"\0" + script.read_bytes())
    return f"{name}-{digest.hexdigest()[:16]}"


def load(kept: str) -> dict[str, Any] | None:
    """The report kept under ``kept``, or None when there is none (or a rerun is asked for)."""
    path = KEPT / f"{kept}.json"
    if os.environ.get("VD_NOVA_BASELINE") == "run" or not path.exists():
        return None
    report: dict[str, Any] = json.loads(path.read_text())
    return report


def store(kept: str, report: dict[str, Any]) -> None:
    """Keep a complete baseline report, written whole or not at all."""
    KEPT.mkdir(parents=True, exist_ok=True)
    path = KEPT / f"{kept}.json"
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(report, indent=1, sort_keys=True))
    partial.replace(path)
