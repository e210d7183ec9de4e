#!/usr/bin/env python3
"""Plots bench/ark_bench's CSV (--csv): scripts/plot_bench.py CSV PNG [TITLE] -> all-reduce latency
and bus bandwidth over message sizes, ark (its automatic choice) against NCCL, eager and graph
launches, and ark's device-side loop.

Needs matplotlib (Debian: apt-get install python3-matplotlib)."""
import csv
import sys
from collections import defaultdict

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot_bench.py needs matplotlib: apt-get install python3-matplotlib")

# (mode, variant) -> label and style; what a reader compares: the same launch mode side by side
SERIES = [
    (("eager", "nccl"), "NCCL eager", dict(color="tab:gray", ls="--")),
    (("eager", "ark_auto"), "ark eager", dict(color="tab:blue", ls="--")),
    (("graph", "nccl"), "NCCL graph", dict(color="tab:gray")),
    (("graph", "ark_auto"), "ark graph", dict(color="tab:blue")),
    (("device", "ark_auto"), "ark device loop", dict(color="tab:green")),
]


def size_label(b):
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if b >= scale:
            return f"{b // scale} {unit}"
    return f"{b} B"


def main(path, out, title):
    points = defaultdict(list)
    for r in csv.DictReader(open(path)):
        if r["wrong"] not in ("0", ""):
            sys.exit(f"{path}: a row with wrong elements ({r['mode']} {r['variant']} {r['bytes']} B): not plotted")
        points[(r["mode"], r["variant"])].append(
            (int(r["bytes"]), float(r["time_us"]), float(r["busbw_gbs"])))
    missing = [label for key, label, _ in SERIES if key not in points]
    if len(missing) == len(SERIES):
        sys.exit(f"{path}: none of the plotted series (ark_auto, nccl) is in the file")
    fig, (lat, bw) = plt.subplots(1, 2, figsize=(13, 4.8))
    for key, label, style in SERIES:
        pts = sorted(points.get(key, []))
        if not pts:
            continue
        sizes = [p[0] for p in pts]
        lat.plot(sizes, [p[1] for p in pts], marker=".", label=label, **style)
        bw.plot(sizes, [p[2] for p in pts], marker=".", label=label, **style)
    for ax in (lat, bw):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size")
        ticks = sorted({p[0] for pts in points.values() for p in pts})[::3]
        ax.set_xticks(ticks, [size_label(t) for t in ticks], rotation=45)
        ax.grid(True, which="major", alpha=0.3)
    lat.set_yscale("log")
    lat.set_ylabel("time per all-reduce (µs, lower is better)")
    bw.set_ylabel("bus bandwidth (GB/s, higher is better)")
    bw.legend(loc="upper left")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot_bench.py: wrote {out}" + (f" (absent: {', '.join(missing)})" if missing else ""))


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else "all-reduce, float sum")
