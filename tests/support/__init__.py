"""Test-only helpers built on :mod:`testhosts.guests` (the guest helpers the demo and the
benchmarks use too): pytest fixtures, connection_info builders, the invariant checker, the stress
workers and a private libvirtd."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

# the checkout: scripts/, fixtures/, docs/ are found from here
ROOT = Path(__file__).resolve().parents[2]

# The embedded QEMU driver takes over every qemu:/// URI of the process that loaded it (a later
# qemu:///system open fails with "Missing URI parameter 'root'"), so its tests run in a child
# pytest of their own (tests/host/test_embed.py starts it).
EMBED_CHILD = os.environ.get("VIRTDRIVER_EMBED_CHILD") == "1"


def script_env(script: Path) -> dict[str, str]:
    """The ``export KEY=VALUE`` lines a test host's script prints for ``env``, as a dict."""
    done = subprocess.run([str(script), "env"], capture_output=True, text=True, check=False)
    env: dict[str, str] = {}
    for line in done.stdout.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line[len("export "):].partition("=")
            env[key] = shlex.split(value)[0] if value else ""
    return env
