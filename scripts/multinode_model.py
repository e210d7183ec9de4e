#!/usr/bin/env python3
"""scripts/multinode_model.py: the alpha-beta model of docs/multinode.md, printed as its table.

All-reduce of S bytes over N nodes x G GPUs (W = N * G ranks), NVLink inside a node, one NIC per
GPU (rail-optimized), per-message latency alpha and per-GPU bandwidth B at each level.
  flat ring (NCCL's ring: G rings, one crossing each rail): 2 (W - 1) steps in lockstep, each as
      slow as its slowest hop (a node crossing: alpha_net); each GPU moves 2 (G - 1) / G * S over
      NVLink and 2 / G * S over its NIC, the two at once:
        2 (W - 1) alpha_net + max(2 (G - 1) / G * S / B_nv, 2 S / (G B_nic))
  hierarchical (ark): local reduce-scatter, the rail's all-reduce of S / G, local all-gather:
      local  (G - 1) alpha_nv + (G - 1) / G * S / B_nv, twice
      rail   the engine's all-reduce of S / G over N nodes, the faster of
             ring  2 (N - 1) alpha_net + 2 (N - 1) / N * (S / G) / B_nic
             tree  2 log2(N) alpha_net + 2 (S / G) / B_nic      (a pipelined double binary tree)
      serial: the three one after the other (what ark does today);
      pipelined: in chunks, NVLink and the NIC busy at once: the latencies, the larger of the two
      volumes' times, and one chunk's worth of the smaller (the pipeline's fill).
Prints one row per (N, S): times in microseconds, and flat / hierarchical.
"""
import math

ALPHA_NV = 3e-6    # s per NVLink step (a one-shot step at small sizes)
ALPHA_NET = 8e-6   # s per inter-node message through the engine (launch + InfiniBand latency)
B_NV = 360e9       # B/s per GPU through NVLink (what all-reduce bus bandwidth reaches on 8 H100s)
B_NIC = 48e9       # B/s per GPU through its 400 Gb/s NIC
G = 8
CHUNKS = 8


def flat_ring(n, s):
    w = n * G
    alpha = 2 * (w - 1) * (ALPHA_NET if n > 1 else ALPHA_NV)
    nv = 2 * (G - 1) / G * s / B_NV
    nic = 2 * s / (G * B_NIC) if n > 1 else 0.0
    return alpha + max(nv, nic)


def rail(n, shard):
    """(latency, bandwidth time) of the engine's all-reduce of `shard` bytes over n nodes."""
    if n == 1:
        return 0.0, 0.0
    ring = (2 * (n - 1) * ALPHA_NET, 2 * (n - 1) / n * shard / B_NIC)
    tree = (2 * math.log2(n) * ALPHA_NET, 2 * shard / B_NIC)
    return min(ring, tree, key=sum)


def hierarchical(n, s, pipelined):
    local_alpha, local_bw = (G - 1) * ALPHA_NV, (G - 1) / G * s / B_NV
    rail_alpha, rail_bw = rail(n, s / G)
    if not pipelined:
        return 2 * (local_alpha + local_bw) + rail_alpha + rail_bw
    slow, fast = max(2 * local_bw, rail_bw), min(2 * local_bw, rail_bw)
    return 2 * local_alpha + rail_alpha + slow + fast / CHUNKS


def main():
    sizes = [("64 KB", 64 << 10), ("16 MB", 16 << 20), ("1 GB", 1 << 30)]
    print("| nodes | size | flat ring (us) | hierarchical, serial (us) | pipelined (us) | flat / pipelined |")
    print("|---|---|---|---|---|---|")
    for n in [2, 4, 16, 64, 256, 1024]:
        for name, s in sizes:
            f, h, p = flat_ring(n, s), hierarchical(n, s, False), hierarchical(n, s, True)
            print(f"| {n} | {name} | {f * 1e6:.0f} | {h * 1e6:.0f} | {p * 1e6:.0f} | {f / p:.2f} |")


if __name__ == "__main__":
    main()
