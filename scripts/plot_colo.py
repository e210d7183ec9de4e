#!/usr/bin/env python3
"""Plots bench/ark_colo's CSV: scripts/plot_colo.py CSV OUTDIR -> stream.png, interference.png, colocation.png.

Needs matplotlib (Debian: apt-get install python3-matplotlib)."""
import csv
import sys
from collections import defaultdict

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot_colo.py needs matplotlib: apt-get install python3-matplotlib")


def main(path, out):
    rows = list(csv.DictReader(open(path)))
    # stream: GB/s per backend against message size, one panel per block count
    stream = defaultdict(list)
    for r in rows:
        if r["part"] == "stream":
            name, blocks = r["variant"].rsplit("/", 1)
            stream[(int(blocks), name)].append((int(r["bytes"]), float(r["v0"])))
    blocks = sorted({b for b, _ in stream})
    fig, axes = plt.subplots(1, len(blocks), figsize=(6 * len(blocks), 4), squeeze=False)
    for ax, b in zip(axes[0], blocks):
        for (bb, name), pts in sorted(stream.items()):
            if bb != b:
                continue
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message bytes")
        ax.set_ylabel("GB/s")
        ax.set_title(f"message stream GPU0 -> GPU1, {b} block(s)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(f"{out}/stream.png", dpi=110)

    # interference: GEMM slowdown vs the collective's busbw beside the GEMM
    fig, ax = plt.subplots(figsize=(7, 5))
    for r in rows:
        if r["part"] == "interf" and r["variant"] != "gemm_alone":
            x, y = float(r["v3"]), float(r["v4"])
            ax.scatter(x, y)
            ax.annotate(r["variant"], (x, y), fontsize=8, xytext=(4, 4), textcoords="offset points")
    ax.axvline(3.0, color="gray", ls="--", lw=0.8)
    ax.set_xlabel("GEMM slowdown beside the collective (%)")
    ax.set_ylabel("collective busbw beside the GEMM (GB/s)")
    ax.set_title("bf16 GEMM 8192^3 + 64 MB collective, per GPU")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(f"{out}/interference.png", dpi=110)

    # co-location: makespan ratio per all-reduce variant
    colo = [(r["variant"], float(r["v4"])) for r in rows if r["part"] == "colo"]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar([c[0] for c in colo], [c[1] for c in colo])
    ax.axhline(0.7, color="gray", ls="--", lw=0.8)
    ax.set_ylabel("makespan co-located / back to back")
    ax.set_title("training + inference loops on the same GPUs")
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    fig.tight_layout()
    fig.savefig(f"{out}/colocation.png", dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
