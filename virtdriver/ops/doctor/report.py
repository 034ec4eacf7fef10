"""Doctor's report as the aligned table an operator reads."""

from __future__ import annotations

from virtdriver.ops.doctor.verdict import DoctorReport


def format_report(report: DoctorReport) -> str:
    """An aligned table of every check, then the verdict."""
    rows = [(c.area, c.name, c.status.upper(), c.detail) for c in report.checks]
    header = ("AREA", "CHECK", "STATUS", "DETAIL")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)) + "  " + header[3],
             "  ".join("-" * w for w in widths) + "  " + "-" * len(header[3])]
    previous = None
    for row in rows:
        area = row[0] if row[0] != previous else ""
        previous = row[0]
        lines.append("  ".join(v.ljust(w) for v, w in zip((area, *row[1:3]), widths))
                     + "  " + row[3])
    lines.append("")
    if report.multiattach_ok:
        warns = sum(c.status == "warn" for c in report.checks)
        lines.append("Multiattach works on this host" +
                     (f" ({warns} warning{'s' if warns != 1 else ''})." if warns else "."))
    else:
        lines.append("Multiattach cannot work on this host:")
        lines += [f"  - {c.name}: {c.detail}" for c in report.failures]
    return "\n".join(lines)
