"""One report of every measured figure: Markdown plus PNG charts, from a single run.

    .venv/bin/python benchmarks/report.py [--out benchmarks/report]
    .venv/bin/python benchmarks/report.py --quick        # what CI runs: seconds, not figures

Runs, each in its own process: render throughput against nova 34 (when a nova venv exists, see
setup-nova-venv.sh), the command line's cold start, attach/detach latency against raw libvirt
with 1, 8, 32 and 96 running guests, fan-out to 8/16/32 guests against a raw parallel loop, the
cost of the "still used on this host" decision from 1 to 64 guests, and live migration against
raw ``migrate3``. Needs root, libvirtd and the ``bench`` extra (matplotlib). Figures are from this
one run on this machine: quote ratios, not absolute numbers, and expect noise.

``--quick`` runs every benchmark with the least work that still goes through all of its code
(one round, two guests, no nova), the benchmarks side by side, and writes the report into a
temporary directory unless ``--out`` is given: it proves the report can be made, nothing about
the figures (CI runs it after the tests, ``scripts/test.sh``).
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
GOALS = {"attach_1": 1.10, "attach_many": 1.15, "detach_1": 1.10, "cli_s": 0.10, "render": 2.0,
         "fanout": 1.30}


def start(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(HERE / script), "--json", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> object:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(proc.args)} failed ({proc.returncode}):\n{err}")
    return json.loads(out.strip().splitlines()[-1])


def run_all(jobs: dict[str, list[str]], together: bool) -> dict[str, object]:
    """Each benchmark in its own process: one after the other (figures), or all at once."""
    if together:
        procs = {name: start(*argv) for name, argv in jobs.items()}
        return {name: finish(proc) for name, proc in procs.items()}
    return {name: finish(start(*argv)) for name, argv in jobs.items()}


def pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def chart_bars(png: Path, title: str, labels: list[str], values: list[float],
               ylabel: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    bars = ax.bar(labels, values, color=["#4c72b0", "#dd8452", "#55a868", "#c44e52"][:len(labels)])
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


def chart_guests(png: Path, rows: list[dict]) -> None:
    """Attach/detach against the number of running guests: ratios to raw, and milliseconds."""
    plt = pyplot()
    x = [r["guests"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    left.plot(x, [r["attach_ratio"] for r in rows], "o-", label="attach")
    left.plot(x, [r["detach_ratio"] for r in rows], "s-", label="detach")
    left.plot(x, [r["read_attach_ratio"] for r in rows], "^--",
              label="floor: host read + raw attach")
    left.axhline(GOALS["attach_many"], color="grey", lw=0.8, ls=":")
    left.axhline(GOALS["attach_1"], color="grey", lw=0.8, ls=":")
    left.axhline(1.0, color="black", lw=0.6)
    right.plot(x, [r["raw_attach_ms"] for r in rows], "o--", label="raw attach")
    right.plot(x, [r["attach_ms"] for r in rows], "o-", label="virtdriver attach")
    right.plot(x, [r["raw_detach_ms"] for r in rows], "s--", label="raw detach")
    right.plot(x, [r["detach_ms"] for r in rows], "s-", label="virtdriver detach")
    for ax, title, ylabel in ((left, "virtdriver / raw libvirt (median)", "ratio"),
                              (right, "latency (median)", "milliseconds")):
        ax.set_title(title)
        ax.set_xlabel("running guests on the host")
        ax.set_ylabel(ylabel)
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [str(v) for v in x])
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def verdict(value: float, goal: float, at_most: bool = True) -> str:
    ok = value <= goal if at_most else value >= goal
    return f"{'met' if ok else '**not met**'} ({'≤' if at_most else '≥'} {goal:g})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="where REPORT.md and the charts go (default: "
                                      "benchmarks/report; a temporary directory with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="the least work through every benchmark, side by side (CI)")
    parser.add_argument("--guests", type=int, nargs="+", default=[1, 8, 32, 96],
                        help="guest counts of the attach/detach curve")
    args = parser.parse_args()
    quick = args.quick
    out = Path(args.out or (tempfile.mkdtemp(prefix="virtdriver-report-") if quick
                            else HERE / "report"))
    out.mkdir(parents=True, exist_ok=True)
    guests = ["1", "2"] if quick else [str(g) for g in sorted(set(args.guests))]
    jobs = {
        "render": ["bench_render.py", *(["--rounds", "1", "--seconds", "0.1", "--nova-python",
                                         "none"] if quick else ["--rounds", "5"])],
        "cli": ["bench_cli.py", "--runs", "1" if quick else "9"],
        "attach": ["bench_attach.py", "--rounds", "1" if quick else "30", "--guests", *guests],
        "fanout": ["bench_fanout.py", "--counts", *(["2"] if quick else ["8", "16", "32"]),
                   "--repeats", "1" if quick else "5", "--png", str(out / "fanout.png")],
        "decision": ["bench_decision.py", "--counts",
                     *(["1", "2"] if quick else ["1", "2", "4", "8", "16", "32", "64"]),
                     "--calls", "2" if quick else "20"],
        "migrate": ["bench_migrate.py", "--rounds", "1" if quick else "3"],
    }
    results = run_all(jobs, together=quick)
    render, cli, curve = results["render"], results["cli"], results["attach"]
    fanout, decision, migrate = results["fanout"], results["decision"], results["migrate"]
    assert isinstance(render, dict) and isinstance(cli, dict) and isinstance(migrate, dict)
    assert isinstance(curve, list) and isinstance(fanout, list) and isinstance(decision, list)
    one = curve[0]
    many = [r for r in curve if r["guests"] > 1]

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
    chart_bars(out / "attach.png", f"Attach / detach, {one['guests']} guest, median (ms)",
               ["raw attach", "driver attach", "raw detach", "driver detach"],
               [one["raw_attach_ms"], one["attach_ms"], one["raw_detach_ms"],
                one["detach_ms"]], "milliseconds")
    chart_guests(out / "guests.png", curve)
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
        "| goal | this run | |",
        "|---|---|---|",
        f"| attach, 1 guest, vs raw `attachDeviceFlags` | {one['attach_ratio']:.2f}x | "
        f"{verdict(one['attach_ratio'], GOALS['attach_1'])} |",
        *[f"| attach, {r['guests']} guests | {r['attach_ratio']:.2f}x | "
          f"{verdict(r['attach_ratio'], GOALS['attach_many'])} |" for r in many],
        f"| detach + DEVICE_REMOVED, 1 guest | {one['detach_ratio']:.2f}x | "
        f"{verdict(one['detach_ratio'], GOALS['detach_1'])} |",
        *[f"| `virtdriver {'--help' if n == 'help' else n}`, whole process, median of "
          f"{cli['runs']} | {cli[n + '_s']:.3f} s | {verdict(cli[n + '_s'], GOALS['cli_s'])} |"
          for n in cli_names],
        *[f"| fan-out to {r['guests']} guests, vs a raw parallel loop | {r['ratio']:.2f}x | "
          f"{verdict(r['ratio'], GOALS['fanout'])} |" for r in fanout],
    ]
    if render["nova_disks_per_s"]:
        lines.append(f"| render vs nova {render['nova_version']} | {render['ratio']}x | "
                     f"{verdict(render['ratio'], GOALS['render'], at_most=False)} |")
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
        f"persistent XML). Medians of {one['rounds']} rounds per count, measured once every "
        "guest is idle: an OS-less guest's firmware keeps a core busy for about 3 s after it "
        "starts, and guests that boot together share the cores, so they are started four at a "
        "time, each four waited for (`timing.start_idle`).",
        "",
        "| guests | domains on the host | raw attach (ms) | virtdriver attach (ms) | ratio | "
        "floor ratio | raw detach (ms) | virtdriver detach (ms) | ratio | calls to libvirtd "
        "(attach / detach) |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *[f"| {r['guests']} | {r['domains']} | {r['raw_attach_ms']:.1f} | {r['attach_ms']:.1f} | "
          f"{r['attach_ratio']:.2f}x | {r['read_attach_ratio']:.2f}x | {r['raw_detach_ms']:.1f} | "
          f"{r['detach_ms']:.1f} | {r['detach_ratio']:.2f}x | {r['attach_round_trips']} / "
          f"{r['detach_round_trips']} |" for r in curve],
        "",
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
        "once it has. The floor row is the raw attach after reading every domain's XML "
        "from libvirtd, what the driver itself reads: #43's goal is at most 1.10x of it. An idle "
        "OS-less guest uses about "
        "1% of a core here.",
        "", "![guests](guests.png)", "", "![attach](attach.png)", "",
        "## Fan-out (multi-create)",
        "",
        "`attach_volume_to_many` against a raw parallel libvirt loop (goal: within 1.3x, one "
        f"host connect). Medians of {fanout[0]['repeats']} rounds, the two sides taking turns "
        "at going first, once every guest is idle.",
        "",
        "| guests | raw (s) | virtdriver (s) | ratio | host connects |",
        "|---|---|---|---|---|",
        *[f"| {r['guests']} | {r['raw_s']} | {r['driver_s']} | {r['ratio']}x | "
          f"{r['host_connects']} |" for r in fanout],
        "", "![fan-out](fanout.png)", "",
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
