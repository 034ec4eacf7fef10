"""``virtdriver extend`` and ``virtdriver swap`` on real guests, and swap's progress bar on a
real pseudo-terminal (and none without one)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Callable
from pathlib import Path

import pytest

from testhosts.guests import LoopDevice, query_block, read_pattern, write_pattern
from tests.fast.test_cli_swap_extend import MIB, command, run
from tests.support.volumes import local_volume


def saved(tmp_path: Path, name: str, info: dict) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(info))
    return str(path)



def qemu_size(dom, alias: str) -> int:
    (size,) = [e["inserted"]["image"]["virtual-size"] for e in query_block(dom)
               if e.get("qdev") == alias and e.get("inserted")]
    return int(size)



@pytest.mark.hypervisor
def test_extend_reaches_the_rw_and_the_ro_guest(guests, tmp_path) -> None:
    a, b = guests.start("xa"), guests.start("xb")
    state = tmp_path / "state"
    with LoopDevice(32 * MIB) as loop:
        info = local_volume(loop.device, multiattach=True)
        vid, alias = info["data"]["volume_id"], f"ua-{info['data']['volume_id']}"
        path = saved(tmp_path, "vol", info)
        assert run(state, "attach", a.name(), path, "--multiattach").returncode == 0
        assert run(state, "attach", b.name(), path, "--multiattach", "--attach-mode",
                   "ro").returncode == 0

        refused = run(state, "extend", path, "--size", "64M")  # the storage has not grown
        assert refused.returncode == 3, refused.stderr
        assert "extend it on the storage side first" in refused.stderr
        assert len(refused.stderr.splitlines()) == 1 and refused.stdout == ""

        loop.extend(64 * MIB)
        done = run(state, "extend", path)  # every guest, to the size the host now sees
        assert done.returncode == 0, done.stderr
        assert f"Volume {vid} extended to 64.0 MiB" in done.stdout
        rows = {line.split()[0]: line for line in done.stdout.splitlines()
                if line.startswith(("vdtest-",))}
        assert "rw" in rows[a.name()] and "resized" in rows[a.name()]
        assert "ro" in rows[b.name()] and "reopened read-only" in rows[b.name()]
        assert "device/rescan" in done.stdout and done.stderr == ""
        assert qemu_size(a, alias) == qemu_size(b, alias) == 64 * MIB  # QEMU, for each guest
        write_pattern(a, alias, 0x7E, offset=48 * MIB)  # past the old end
        assert read_pattern(b, alias, 0x7E, offset=48 * MIB)

        shrink = run(state, "extend", path, b.name(), "--size", "16M")
        assert shrink.returncode == 3 and "would destroy data" in shrink.stderr

        again = json.loads(run(state, "extend", path, b.name(), "--json").stdout)
        assert again["complete"] is True and again["size"] == 64 * MIB
        assert [(g["guest"], g["how"], g["size"]) for g in again["guests"]] == [
            (b.name(), "unchanged", 64 * MIB)]

        for dom in (a, b):
            assert run(state, "detach", dom.name(), vid).returncode == 0
        gone = run(state, "extend", path)
        assert gone.returncode == 1 and gone.stderr.splitlines() == [
            f"virtdriver: error: volume {vid} is not attached to any guest on this host"]



@pytest.mark.hypervisor
def test_swap_keeps_the_mode_prints_no_progress_off_a_terminal_and_refuses(guests,
                                                                           tmp_path) -> None:
    a, b = guests.start("sa"), guests.start("sb")
    state = tmp_path / "state"
    with LoopDevice(32 * MIB) as old_dev, LoopDevice(32 * MIB) as new_dev, \
            LoopDevice(32 * MIB) as other_dev:
        old = saved(tmp_path, "old", local_volume(old_dev.device, multiattach=True))
        new = saved(tmp_path, "new", local_volume(new_dev.device, multiattach=False))
        other = saved(tmp_path, "other", local_volume(other_dev.device, multiattach=False))
        new_vid = json.loads(Path(new).read_text())["data"]["volume_id"]
        assert run(state, "attach", a.name(), old, "--multiattach").returncode == 0
        assert run(state, "attach", b.name(), old, "--multiattach", "--attach-mode",
                   "ro").returncode == 0

        refused = run(state, "swap", b.name(), old, new)  # a writes to the old volume
        assert refused.returncode == 3 and len(refused.stderr.splitlines()) == 1
        assert "attached read-write to" in refused.stderr
        missing = run(state, "swap", b.name(), new, other)  # new is not attached to b
        assert missing.returncode == 1 and len(missing.stderr.splitlines()) == 1

        assert run(state, "detach", a.name(),
                   json.loads(Path(old).read_text())["data"]["volume_id"]).returncode == 0
        done = run(state, "swap", b.name(), old, new)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""  # no progress when the output is not a terminal
        assert done.stdout.startswith(f"Guest {b.name()} now uses volume {new_vid} as /dev/sda "
                                      "(ro") and done.stdout.count("\n") == 1

        back = run(state, "swap", b.name(), new, other, "--json")
        assert back.returncode == 0 and back.stderr == ""
        attached = json.loads(back.stdout)
        assert (attached["attach_mode"], attached["device"]) == ("ro", "/dev/sda")
        assert attached["source"] == other_dev.device



def on_pty(argv: list[str], watch: Callable[[str, subprocess.Popen], None] | None = None,
           ) -> tuple[int, str]:
    """Run ``argv`` with a pseudo-terminal (120 columns) as its standard streams; ``watch`` sees
    the output so far after every read. Returns the exit status and everything written."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    output = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 60)
            if not ready:
                continue  # still working; the pytest-level timeout is the bound
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not chunk:
                break
            output += chunk
            if watch is not None:
                watch(output.decode(errors="replace"), proc)
    finally:
        os.close(master)
    return proc.wait(), output.decode(errors="replace")



def bar_percents(output: str) -> list[int]:
    """The percentages of each progress bar drawn (tqdm: ``label:  42%|####  | ...``)."""
    return [int(p) for p in re.findall(r"copying to the new volume:\s+(\d+)%\|", output)]



@pytest.mark.hypervisor
def test_swap_of_1_gib_shows_a_moving_progress_bar_on_a_terminal(guests, tmp_path) -> None:
    dom = guests.start("bar")
    state = tmp_path / "state"
    with LoopDevice(1 << 30) as old_dev, LoopDevice(1 << 30) as new_dev:
        old = saved(tmp_path, "old", local_volume(old_dev.device, multiattach=False))
        new = saved(tmp_path, "new", local_volume(new_dev.device, multiattach=False))
        assert run(state, "attach", dom.name(), old).returncode == 0
        status, output = on_pty(command(state, "swap", dom.name(), old, new))
        assert status == 0, output
        percents = bar_percents(output)
        assert len(percents) >= 3 and percents == sorted(percents), output
        assert percents[0] < 100 and percents[-1] == 100
        assert any(0 < p < 100 for p in percents), output  # it moved, not just start and end
        assert "1.00G/1.00G" in output and "B/s" in output  # bytes and rate
        assert "now uses volume" in output

        # --json on the same terminal: the JSON only, no bar.
        status, output = on_pty(command(state, "swap", dom.name(), new, old, "--json"))
        assert status == 0 and bar_percents(output) == [] and "%|" not in output
        assert json.loads(output)["source"] == old_dev.device



@pytest.mark.hypervisor
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_ctrl_c_during_the_copy_leaves_the_guest_on_the_old_volume(guests, tmp_path,
                                                                   sig) -> None:
    from virtdriver import LibvirtVolumeDriver

    dom = guests.start("intr")
    state = tmp_path / "state"
    with LoopDevice(1 << 30) as old_dev, LoopDevice(1 << 30) as new_dev:
        old_info = local_volume(old_dev.device, multiattach=False)
        new_info = local_volume(new_dev.device, multiattach=False)
        old, new = saved(tmp_path, "old", old_info), saved(tmp_path, "new", new_info)
        assert run(state, "attach", dom.name(), old).returncode == 0
        interrupted: list[bool] = []

        def interrupt_once_the_bar_shows(text: str, proc: subprocess.Popen) -> None:
            if not interrupted and bar_percents(text):
                # Slow the copy to 1 MiB/s so that it is surely still running, then Ctrl-C.
                dom.blockJobSetSpeed("sda", 1, 0)
                proc.send_signal(sig)
                interrupted.append(True)

        status, output = on_pty(command(state, "swap", dom.name(), old, new),
                                interrupt_once_the_bar_shows)
        assert interrupted and status == 130, output
        assert (f"virtdriver: error: interrupted (the copy was cancelled; {dom.name()} keeps "
                "its old volume") in output
        assert dom.blockJobInfo("sda", 0) == {}  # no copy left running
        driver = LibvirtVolumeDriver("qemu:///system", state_dir=state)
        try:
            (att,) = driver.list_attachments(dom.name())
            assert (att.volumeId, att.source) == (old_info["data"]["volume_id"], old_dev.device)
            assert driver.records.connected() == [old_info["data"]["volume_id"]]  # new released
        finally:
            driver.close()



@pytest.mark.hypervisor
def test_a_copy_that_runs_out_of_time_exits_4_and_keeps_the_old_volume(guests,
                                                                       tmp_path) -> None:
    from virtdriver import LibvirtVolumeDriver

    dom = guests.start("late")
    state = tmp_path / "state"
    with LoopDevice(1 << 30) as old_dev, LoopDevice(1 << 30) as new_dev:
        old_info = local_volume(old_dev.device, multiattach=False)
        old = saved(tmp_path, "old", old_info)
        new = saved(tmp_path, "new", local_volume(new_dev.device, multiattach=False))
        assert run(state, "attach", dom.name(), old).returncode == 0
        late = run(state, "swap", dom.name(), old, new, "--timeout", "0.01")
        assert late.returncode == 4, late.stderr  # OperationTimeout, as the README's table says
        assert len(late.stderr.splitlines()) == 1 and "within 0.01 s" in late.stderr
        assert dom.blockJobInfo("sda", 0) == {}
        driver = LibvirtVolumeDriver("qemu:///system", state_dir=state)
        try:
            (att,) = driver.list_attachments(dom.name())
            assert att.source == old_dev.device
            assert driver.records.connected() == [old_info["data"]["volume_id"]]
        finally:
            driver.close()
