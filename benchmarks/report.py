"""One report of every measured figure: Markdown plus PNG charts, from a single run.

    .venv/bin/python benchmarks/report.py [--out benchmarks/report]
    .venv/bin/python benchmarks/report.py --quick        # what CI runs: seconds, not figures

Runs, each in its own process: render throughput against nova 34 (when a nova venv exists, see
setup-nova-venv.sh), the command line's cold start, attach/detach latency against raw libvirt,
the floor and nova 34's own ``LibvirtDriver`` (``bench_nova_attach.py``, in the venv
``scripts/nova-suite.sh`` builds) with 1, 32 and 96 running guests, fan-out to 8/16/32 guests
against a raw parallel loop, the cost of the "still used on this host" decision from 1 to 64
guests, and live migration against raw ``migrate3``. Needs root, libvirtd, the ``bench`` extra
(matplotlib) and nova-suite.sh's venv. Figures are from this one run on this machine: quote
ratios, not absolute numbers, and expect noise.

``--quick`` runs every benchmark with the least work that still goes through all of its code
(one round, two guests, no nova render; nova's attach only when nova-suite.sh's venv exists,
the reason stated in the report when not), the benchmarks side by side, and writes the report
into a temporary directory unless ``--out`` is given: it proves the report can be made, nothing
about the figures (CI runs it after the tests, ``scripts/test.sh``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_nova_attach import nova_python  # noqa: E402

# Issue #43, item 6: attach and detach at each guest count at most 1.10x the floor and no slower
# than nova's own attach path; each command's cold start in seconds; render at least nova's rate.
GOALS = {"attach_floor": 1.10, "detach_floor": 1.10, "attach_nova": 1.00, "detach_nova": 1.00,
         "render_s": 0.15, "list_s": 0.25, "help_s": 0.10, "render_nova": 1.0,
         "storm": 1.2, "storm_spread": 2.0}
SIDES = {"raw": "#4c72b0", "floor": "#dd8452", "virtdriver": "#55a868", "nova": "#c44e52"}


def start(argv: list[str]) -> subprocess.Popen[str]:
    """One benchmark's process: ``argv`` is its python, its script in benchmarks/, its options."""
    python, script, *args = argv
    return subprocess.Popen([python, str(HERE / script), "--json", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> object:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(proc.args)} failed ({proc.returncode}):\n{err}")
    return json.loads(out.strip().splitlines()[-1])


def run_all(jobs: dict[str, list[str]], together: bool) -> dict[str, object]:
    """Each benchmark in its own process: one after the other (figures), or all at once."""
    if together:
        procs = {name: start(argv) for name, argv in jobs.items()}
        return {name: finish(proc) for name, proc in procs.items()}
    return {name: finish(start(argv)) for name, argv in jobs.items()}


def pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def chart_bars(png: Path, title: str, labels: list[str], values: list[float],
               ylabel: str, colors: list[str] | None = None) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(labels)), 3.2))
    bars = ax.bar(labels, values, color=colors or list(SIDES.values())[:len(labels)])
    ax.bar_label(bars, fmt="%.3g")
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def chart_lines(png: Path, title: str, x: list[int], series: dict[str, list[float]],
                xlabel: str, ylabel: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for name, ys in series.items():
        ax.plot(x, ys, "o-", label=name)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xticks(x)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def chart_guests(png: Path, rows: list[dict], nova: dict[int, dict]) -> None:
    """Attach/detach against the running guests: ratios to the floor and nova, milliseconds."""
    plt = pyplot()
    x = [r["guests"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    left.plot(x, [r["floor_attach_ratio"] for r in rows], "o-", label="attach / floor")
    left.plot(x, [r["floor_detach_ratio"] for r in rows], "s-", label="detach / floor")
    if nova:
        for op, marker in (("attach", "o"), ("detach", "s")):
            left.plot(x, [r[op + "_ms"] / nova[r["guests"]]["nova_" + op + "_ms"] for r in rows],
                      marker + "--", label=f"{op} / nova")
    left.axhline(GOALS["attach_floor"], color="grey", lw=0.8, ls=":")
    left.axhline(1.0, color="black", lw=0.6)
    right.plot(x, [r["raw_attach_ms"] for r in rows], "o:", label="raw attach")
    right.plot(x, [r["read_attach_ms"] for r in rows], "o--", label="floor attach")
    right.plot(x, [r["attach_ms"] for r in rows], "o-", label="virtdriver attach")
    right.plot(x, [r["raw_detach_ms"] for r in rows], "s:", label="raw detach")
    right.plot(x, [r["read_detach_ms"] for r in rows], "s--", label="floor detach")
    right.plot(x, [r["detach_ms"] for r in rows], "s-", label="virtdriver detach")
    if nova:
        right.plot(x, [nova[g]["nova_attach_ms"] for g in x], "o-.", label="nova attach")
        right.plot(x, [nova[g]["nova_detach_ms"] for g in x], "s-.", label="nova detach")
    for ax, title, ylabel in ((left, "virtdriver / floor, / nova (median)", "ratio"),
                              (right, "latency (median)", "milliseconds")):
        ax.set_title(title)
        ax.set_xlabel("running guests on the host")
        ax.set_ylabel(ylabel)
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [str(v) for v in x])
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def verdict(value: float, goal: float, at_most: bool = True) -> str:
    ok = value <= goal if at_most else value >= goal
    return f"{'met' if ok else '**not met**'} ({'≤' if at_most else '≥'} {goal:.2f})"


def goal_row(goal: str, value: float | None, key: str, unit: str = "x", *,
             at_most: bool = True, missing: str = "") -> str:
    """One row of the goals table; ``value`` ``None``: not measured, for ``missing``."""
    if value is None:
        return f"| {goal} | – | not measured: {missing} |"
    shown = f"{value:.3f} s" if unit == "s" else f"{value:.2f}x"
    return f"| {goal} | {shown} | {verdict(value, GOALS[key], at_most)} |"


def to_nova(nova: dict[int, dict], row: dict, op: str) -> float | None:
    """virtdriver's median over nova's at the same guest count, if nova was measured."""
    theirs = nova.get(row["guests"])
    return row[op + "_ms"] / theirs["nova_" + op + "_ms"] if theirs else None


def storm_goals(storms: list[dict]) -> list[str]:
    """#45's goals for attach storms: within 1.2x of raw, p95 within 2x of the median."""
    rows = []
    for r in storms:
        what = f"storm of {r['attaches']} attaches, {r['storm']}"
        rows.append(goal_row(f"{what}: at most 1.2x raw", r["ratio"], "storm", "x"))
        rows.append(goal_row(f"{what}: p95 at most 2x the median", r["p95_to_median"],
                             "storm_spread", "x"))
    return rows


def guests_label(row: dict) -> str:
    return f"{row['guests']} guest{'s' if row['guests'] > 1 else ''}"


def latency_goals(curve: list[dict], nova: dict[int, dict], no_nova: str) -> list[str]:
    """The goals table's rows of attach and detach: against the floor and nova, each count."""
    rows = []
    for r in curve:
        where = guests_label(r)
        for op, what in (("attach", "attach"), ("detach", "detach + DEVICE_REMOVED")):
            rows.append(goal_row(f"{what}, {where}, vs the floor", r[f"floor_{op}_ratio"],
                                 f"{op}_floor"))
            rows.append(goal_row(f"{what}, {where}, vs nova's `LibvirtDriver.{op}_volume`",
                                 to_nova(nova, r, op), f"{op}_nova", missing=no_nova))
    return rows


def latency_table(op: str, curve: list[dict], nova: dict[int, dict]) -> list[str]:
    """The report's table of one operation: raw, floor, virtdriver and nova at each count."""
    lines = [f"| {op}: guests | domains on the host | raw (ms) | floor (ms) | virtdriver (ms) | "
             "nova (ms) | virtdriver / floor | virtdriver / nova | calls to libvirtd: "
             "virtdriver / nova |", "|---|---|---|---|---|---|---|---|---|"]
    for r in curve:
        theirs, ratio = nova.get(r["guests"]), to_nova(nova, r, op)
        lines.append(
            f"| {r['guests']} | {r['domains']} | {r['raw_' + op + '_ms']:.1f} | "
            f"{r['read_' + op + '_ms']:.1f} | {r[op + '_ms']:.1f} | "
            f"{'–' if theirs is None else format(theirs['nova_' + op + '_ms'], '.1f')} | "
            f"{r['floor_' + op + '_ratio']:.2f}x | "
            f"{'–' if ratio is None else format(ratio, '.2f') + 'x'} | "
            f"{r[op + '_round_trips']} / "
            f"{'–' if theirs is None else theirs['nova_' + op + '_round_trips']} |")
    return lines


def nova_section(rows: list[dict], guests: list[str]) -> list[str]:
    """The report's lines on bench_nova_attach.py's run: what it measures, and its medians."""
    return [
        f"`benchmarks/bench_nova_attach.py --guests {' '.join(guests)}`, in the venv "
        "`scripts/nova-suite.sh` builds: nova "
        f"{rows[0]['nova_version']}'s own `nova.virt.libvirt.driver.LibvirtDriver` on "
        "qemu:///system, set up and driven as `tests/nova/test_nova_guests.py` does "
        "(`attach_volume(..., '/dev/sdb', disk_bus='scsi')`, `detach_volume`, which waits for "
        f"DEVICE_REMOVED), in {rows[0]['concurrency']} mode as `nova-compute` 34 starts. The "
        "volume is bench_attach's `connection_info` (type `gpfs`, multiattach, a raw file), "
        "which nova's table gives to `LibvirtGPFSVolumeDriver`: a `<disk type='file'>` whose "
        "connect and disconnect do nothing, as virtdriver's. Guests of the same shape, each "
        "with a volume of its own attached by nova. Where nova's path leaves the host it gets "
        "the answer for free, so its figures are a lower bound: the block-storage service's "
        "`volume_api.get` of its multiattach detach is answered from memory, its database is "
        "an in-memory SQLite. Its own process, on guests of its own: virtdriver / nova spans "
        "the two runs, and each run's raw figures show how far the host moved between them."
        f" Medians of {rows[0]['rounds']} rounds, nova and raw alternating.",
        "",
        "| guests | domains on the host | raw attach (ms) | nova attach (ms) | nova / raw | "
        "raw detach (ms) | nova detach (ms) | nova / raw | nova's CPU, attach / detach (ms) |",
        "|---|---|---|---|---|---|---|---|---|",
        *[f"| {r['guests']} | {r['domains']} | {r['raw_attach_ms']:.1f} | "
          f"{r['nova_attach_ms']:.1f} | {r['nova_attach_ratio']:.2f}x | "
          f"{r['raw_detach_ms']:.1f} | {r['nova_detach_ms']:.1f} | "
          f"{r['nova_detach_ratio']:.2f}x | {r['nova_attach_cpu_ms']:.1f} / "
          f"{r['nova_detach_cpu_ms']:.1f} |" for r in rows],
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="where REPORT.md and the charts go (default: "
                                      "benchmarks/report; a temporary directory with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="the least work through every benchmark, side by side (CI)")
    parser.add_argument("--guests", type=int, nargs="+", default=[1, 32, 96],
                        help="guest counts of the attach/detach curve (the goals': 1 32 96)")
    args = parser.parse_args()
    quick = args.quick
    out = Path(args.out or (tempfile.mkdtemp(prefix="virtdriver-report-") if quick
                            else HERE / "report"))
    nova_py, no_nova = nova_python()
    if nova_py is None and not quick:
        raise SystemExit(f"report.py: {no_nova}; the goals compare with nova's attach path")
    out.mkdir(parents=True, exist_ok=True)
    guests = ["1", "2"] if quick else [str(g) for g in sorted(set(args.guests))]
    python = sys.executable
    jobs = {
        "render": [python, "bench_render.py",
                   *(["--rounds", "1", "--seconds", "0.1", "--nova-python", "none"] if quick
                     else ["--rounds", "5"])],
        "cli": [python, "bench_cli.py", "--runs", "1" if quick else "9"],
        "attach": [python, "bench_attach.py", "--rounds", "1" if quick else "30",
                   "--guests", *guests],
        "fanout": [python, "bench_fanout.py", "--counts", *(["2"] if quick else ["8", "16", "32"]),
                   "--repeats", "1" if quick else "5", "--png", str(out / "fanout.png")],
        "decision": [python, "bench_decision.py", "--counts",
                     *(["1", "2"] if quick else ["1", "2", "4", "8", "16", "32", "64"]),
                     "--calls", "2" if quick else "20"],
        "migrate": [python, "bench_migrate.py", "--rounds", "1" if quick else "3"],
        "storm": [python, "bench_storm.py", "--counts", *(["2"] if quick else ["16", "64"]),
                  "--shared", "2" if quick else "64", "--repeats", "1" if quick else "3"],
    }
    if nova_py is not None:
        jobs["nova_attach"] = [str(nova_py), "bench_nova_attach.py",
                               "--rounds", "1" if quick else "30", "--guests", *guests]
    results = run_all(jobs, together=quick)
    render, cli, curve = results["render"], results["cli"], results["attach"]
    fanout, decision, migrate = results["fanout"], results["decision"], results["migrate"]
    storms = results["storm"]
    assert isinstance(storms, list)
    nova_rows = results.get("nova_attach", [])
    nova_rows = [nova_rows] if isinstance(nova_rows, dict) else nova_rows
    assert isinstance(render, dict) and isinstance(cli, dict) and isinstance(migrate, dict)
    assert isinstance(curve, list) and isinstance(fanout, list) and isinstance(decision, list)
    assert isinstance(nova_rows, list)
    nova = {r["guests"]: r for r in nova_rows}
    one = curve[0]

    no_render = "--quick skips nova's render" if quick else (
        "no nova venv for bench_render.py (benchmarks/setup-nova-venv.sh)")

    labels, values = ["virtdriver"], [render["virtdriver_disks_per_s"]]
    if render["nova_disks_per_s"]:
        labels.append(f"nova {render['nova_version']}")
        values.append(render["nova_disks_per_s"])
    chart_bars(out / "render.png", "Render throughput (higher is better)", labels, values,
               "disks per second")
    cli_names = [n for n in ("render", "list", "help") if f"{n}_s" in cli]
    chart_bars(out / "cli.png", "Command-line cold start, median (s)",
               [f"virtdriver {'--help' if n == 'help' else n}" for n in cli_names],
               [cli[f"{n}_s"] for n in cli_names], "seconds (whole process)")
    bars = {"raw attach": one["raw_attach_ms"], "floor attach": one["read_attach_ms"],
            "virtdriver attach": one["attach_ms"], "raw detach": one["raw_detach_ms"],
            "floor detach": one["read_detach_ms"], "virtdriver detach": one["detach_ms"]}
    if one["guests"] in nova:
        bars |= {"nova attach": nova[one["guests"]]["nova_attach_ms"],
                 "nova detach": nova[one["guests"]]["nova_detach_ms"]}
    chart_bars(out / "attach.png", f"Attach / detach, {guests_label(one)}, median (ms)",
               [k.replace(" ", "\n") for k in bars], list(bars.values()), "milliseconds",
               [SIDES[k.split()[0]] for k in bars])
    chart_guests(out / "guests.png", curve, nova)
    chart_lines(out / "decision.png", "'Still used on this host?' decision",
                [r["guests"] for r in decision], {"Host.users": [r["decision_ms"]
                                                                 for r in decision]},
                "guests on the host", "milliseconds")

    lines = [
        "# virtdriver benchmarks",
        "",
        f"One run on {platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}), {datetime.datetime.now():%Y-%m-%d %H:%M}, "
        f"`benchmarks/report.py`{' --quick (figures meaningless)' if quick else ''}. "
        "Ratios are measured side by side in this run, the sides alternating round by round; "
        "absolute figures depend on the machine and on what else runs on it (this machine's "
        "2 cores are shared with other work).",
        "",
        "## Goals",
        "",
        "Issue #43's goals: attach and detach at each guest count at most 1.10x the floor (the "
        "raw libvirt call plus the public reads the sharing decision needs) and no slower than "
        "nova 34's own `LibvirtDriver.attach_volume`/`detach_volume` on this host; each command's "
        "cold start; render throughput at least nova's.",
        "",
        "| goal | this run | |",
        "|---|---|---|",
        *latency_goals(curve, nova, no_nova),
        *[goal_row(f"`virtdriver {'--help' if n == 'help' else n}`, whole process, median of "
                   f"{cli['runs']}", cli[n + "_s"], n + "_s", "s") for n in cli_names],
        goal_row(f"render vs nova {render['nova_version'] or '34'}", render["ratio"],
                 "render_nova", at_most=False, missing=no_render),
        *storm_goals(storms),
    ]
    lines += [
        "",
        "## Render throughput",
        "",
        "`build_disk(...).to_xml()` for a multiattach read-only iSCSI disk with QoS, discard "
        "and a SCSI unit, against nova's `LibvirtISCSIVolumeDriver.get_config(...).to_xml()` "
        "in nova's "
        f"own venv (median of {render['rounds']} alternating rounds).",
        "",
        "| renderer | disks/s |",
        "|---|---|",
        f"| virtdriver | {render['virtdriver_disks_per_s']:,} |",
    ]
    if render["nova_disks_per_s"]:
        lines += [f"| nova {render['nova_version']} | {render['nova_disks_per_s']:,} |", "",
                  f"virtdriver / nova = **{render['ratio']}x**"]
    else:
        lines += ["", "nova not measured (run benchmarks/setup-nova-venv.sh)"]
    lines += [
        "", "![render](render.png)", "",
        "## Command-line cold start",
        "",
        "The whole `virtdriver` process, from exec to exit (`benchmarks/bench_cli.py`), each "
        f"command {cli['runs']} times, interleaved. `list` connects to libvirt and reads an "
        "OS-less guest with one volume. The package's bytecode is compiled first, as `pip "
        "install` does (this sandbox sets PYTHONDONTWRITEBYTECODE, which would otherwise make "
        "every start compile the sources). Only what a command uses is imported (`python -X "
        "importtime`): libvirt, os-brick and tqdm only by the commands that use them.",
        "",
        "| command | median (s) | fastest (s) |",
        "|---|---|---|",
        *[f"| `virtdriver {'--help' if n == 'help' else n}` | {cli[n + '_s']:.3f} | "
          f"{cli[n + '_min_s']:.3f} |" for n in cli_names],
        f"| `python -c pass` (the interpreter alone) | {cli['python_s']:.3f} | "
        f"{cli['python_min_s']:.3f} |",
        "", "![cli](cli.png)", "",
        "## Attach and detach latency, against the number of running guests",
        "",
        "`benchmarks/bench_attach.py --guests " + " ".join(guests) + "`: every guest runs with "
        "a volume of its own (a disk in each guest, a host-connection record each), one guest is "
        "measured on. Raw: `attachDeviceFlags` of the same `<disk>` (live and persistent), "
        "`detachDeviceFlags` + DEVICE_REMOVED. Floor: the raw attach preceded by the libvirt "
        "calls that reading who uses the data takes (both domain lists, each domain's live and "
        "persistent XML), and the raw detach followed by the same read (is the volume still "
        f"used here?). Medians of {one['rounds']} rounds per count, measured once every "
        "guest is idle: an OS-less guest's firmware keeps a core busy for about 3 s after it "
        "starts, and guests that boot together share the cores, so they are started four at a "
        "time, each four waited for (`timing.start_idle`). nova: its own run, below.",
        "",
        *latency_table("attach", curve, nova), "",
        *latency_table("detach", curve, nova), "",
        "What the driver does beyond raw libvirt, under the volume's and the data's locks: the "
        "list of the host's domains and every domain's live and persistent XML as libvirt has "
        "it now (the sharing and \"still used\" decisions), asked of libvirt's API on every "
        "decision: both domain lists and each domain's XML, so the calls to libvirtd grow with "
        "the guests (the last column, counted in one untimed run; "
        "`benchmarks/profile_attach.py` names them); a look at each XML text for the volume's "
        "alias, a swap note, the identity of every source path or a network volume's name, so "
        "that only the guests that can hold the volume or its data are parsed; the crash-safe "
        "record of the host connection; the guest's lock and target choice; the render. A "
        "detach reads the other guests while the guest releases the device, and the guest itself "
        "once it has. The floor is the raw call with the reads of every domain's XML from "
        "libvirtd the driver itself makes: #43's goal is at most 1.10x of it. An idle "
        "OS-less guest uses about 1% of a core here.",
        "",
        "### nova's own attach path",
        "",
        *(nova_section(nova_rows, guests) if nova_rows else [f"nova not measured: {no_nova}."]),
        "", "![guests](guests.png)", "", "![attach](attach.png)", "",
        "## Fan-out (multi-create)",
        "",
        "`attach_volume_to_many` against a raw parallel libvirt loop (one host connect; no "
        "goal since #43 item 6 re-based the goals). Medians of "
        f"{fanout[0]['repeats']} rounds, the two sides taking turns "
        "at going first, once every guest is idle.",
        "",
        "| guests | raw (s) | virtdriver (s) | ratio | host connects |",
        "|---|---|---|---|---|",
        *[f"| {r['guests']} | {r['raw_s']} | {r['driver_s']} | {r['ratio']}x | "
          f"{r['host_connects']} |" for r in fanout],
        "", "![fan-out](fanout.png)", "",
        "## Attach storms",
        "",
        "`benchmarks/bench_storm.py`: every attach started at once from a thread of its own, "
        "each a separate `attach_volume` call, against raw `attachDeviceFlags` doing the same "
        "from as many threads (#45). *Different volumes*: volume i to guest i (raw files, the "
        "GPFS connector). *One volume*: one multiattach volume to every guest; the callers that "
        "wait for its lock together are attached as one attach to many "
        "(`driver/attach_batch.py`: one read of the host, one decision, parallel attaches). "
        "Latency: from the storm's start until that attach "
        f"returned; medians over {storms[0]['repeats']} storms, the sides taking turns.",
        "",
        "| storm | attaches | raw total (s) | virtdriver total (s) | ratio | raw median / p95 / "
        "max (s) | virtdriver median / p95 / max (s) |",
        "|---|---|---|---|---|---|---|",
        *[f"| {r['storm']} | {r['attaches']} | {r['raw']['total_s']} | {r['driver']['total_s']} "
          f"| {r['ratio']}x | {r['raw']['median_s']} / {r['raw']['p95_s']} / "
          f"{r['raw']['max_s']} | {r['driver']['median_s']} / {r['driver']['p95_s']} / "
          f"{r['driver']['max_s']} |" for r in storms],
        "",
        "## The 'still used on this host' decision",
        "",
        "As detach takes it (`Host.users(volume, data)`): the list of domains (kept while no "
        "domain came or went), every domain's XML as libvirt has it now (read again, from "
        "libvirt's saved files, only for the domains libvirt changed), "
        "the guests that can hold the volume or its data parsed (here every guest holds it: the "
        "worst case, which grows with the guests), the arrivals by live migration.",
        "",
        "| guests | decision (ms) |",
        "|---|---|",
        *[f"| {r['guests']} | {r['decision_ms']} |" for r in decision],
        "", "![decision](decision.png)", "",
        "## Live migration with a shared volume",
        "",
        "A guest with a multiattach volume (its neighbour on the source keeps it read-only) moved "
        "between two libvirt daemons of this machine: `LibvirtVolumeDriver.migrate` against a raw "
        "`migrate3` with the same flags. Downtime is libvirt's own measure of the completed job.",
        "",
        "| method | total (s) | downtime (ms) |",
        "|---|---|---|",
        *[f"| {m} | {migrate[m]['total_s']:.2f} | {migrate[m]['downtime_ms']:.0f} |"
          for m in ("raw", "driver")],
        "",
        f"virtdriver / raw: total **{migrate['ratio_total']:.2f}x**, downtime "
        f"**{migrate['ratio_downtime']:.2f}x**",
        "",
    ]
    (out / "REPORT.md").write_text("\n".join(lines))
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(f"report: {out / 'REPORT.md'}")


if __name__ == "__main__":
    main()
