"""torch.distributed's collectives on ark's NCCL API, checked against references:

    LD_PRELOAD=<build>/apps/nccl/libnccl.so.2 python3 examples/pytorch/collectives.py --world 3

all_reduce (every op), all_gather_into_tensor, reduce_scatter_tensor, broadcast, all_to_all_single
(even and uneven splits), send/recv (a ring, batched), barrier, on every dtype PyTorch passes to
NCCL. Ranks use GPU rank % (GPU count): with more ranks than GPUs they share one.
"""
import argparse
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
          torch.int64, torch.bool]
OPS = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}


def values(rank, n, dtype, device, offset=0):
    """Rank r's elements: small integers (1 to 3), exact in every dtype; bool: alternating."""
    i = torch.arange(offset, offset + n, device=device)
    v = (rank * 5 + i * 3) % 3 + 1
    return (v % 2 == 0) if dtype == torch.bool else v.to(dtype)


def reference(op, world, n, dtype, device, offset=0):
    stack = torch.stack([values(r, n, dtype, device, offset).to(torch.float64) for r in range(world)])
    if dtype == torch.bool:  # PyTorch reduces bool as max (sum) / min (product)
        return (stack.amax(0) if op in ("sum", "max") else stack.amin(0)).to(torch.bool)
    red = {"sum": stack.sum(0), "product": stack.prod(0), "min": stack.amin(0), "max": stack.amax(0),
           "avg": stack.sum(0) / world}[op]
    if op == "avg" and not dtype.is_floating_point:
        red = torch.trunc(red)
    return red.to(dtype)


def close(a, b):
    if a.dtype == torch.bool or not a.dtype.is_floating_point:
        return torch.equal(a, b)
    return torch.allclose(a.to(torch.float64), b.to(torch.float64), rtol=1e-2, atol=1e-6)


def rank_main(rank, world, port, out):
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    failures = []
    checks = 0

    def check(ok, what):
        nonlocal checks
        checks += 1
        if not ok:
            failures.append(what)

    n = 1001
    for dtype in DTYPES:
        for name, op in OPS.items():
            if name == "avg" and not dtype.is_floating_point:
                continue  # PyTorch takes AVG for floating types only
            if dtype == torch.bool and name not in ("sum", "product", "min", "max"):
                continue
            t = values(rank, n, dtype, device)
            try:
                dist.all_reduce(t, op=op)
                check(close(t, reference(name, world, n, dtype, device)), f"all_reduce {dtype} {name}")
            except Exception as e:  # a call ark refused
                check(False, f"all_reduce {dtype} {name}: {e}")
        # PreMulSum: PyTorch hands NCCL a float factor for bfloat16, which NCCL (and ark, as NCCL)
        # reads as a bfloat16: the factor is not 0.5 there, on NCCL's library as on ark's
        if dtype.is_floating_point and dtype not in (torch.float64, torch.bfloat16):
            pre = dist._make_nccl_premul_sum(0.5)
            t = values(rank, n, dtype, device)
            dist.all_reduce(t, op=pre)
            check(close(t, (reference("sum", world, n, dtype, device).to(torch.float64) * 0.5).to(dtype)),
                  f"all_reduce {dtype} premul_sum")
        # all_gather_into_tensor, reduce_scatter_tensor (sum), broadcast
        mine = values(rank, n, dtype, device)
        gathered = torch.empty(world * n, dtype=dtype, device=device)
        dist.all_gather_into_tensor(gathered, mine)
        check(torch.equal(gathered, torch.cat([values(r, n, dtype, device) for r in range(world)])),
              f"all_gather_into_tensor {dtype}")
        if dtype != torch.bool:
            full = values(rank, n * world, dtype, device)
            part = torch.empty(n, dtype=dtype, device=device)
            dist.reduce_scatter_tensor(part, full)
            check(close(part, reference("sum", world, n, dtype, device, offset=rank * n)),
                  f"reduce_scatter_tensor {dtype}")
        root = world // 2
        b = values(root, n, dtype, device) if rank == root else torch.zeros(n, dtype=dtype, device=device)
        dist.broadcast(b, src=root)
        check(torch.equal(b, values(root, n, dtype, device)), f"broadcast {dtype}")
        # all_to_all_single: even, then uneven splits (rank r sends r + p + 1 elements to p)
        a_in = values(rank, n * world, dtype, device)
        a_out = torch.empty(n * world, dtype=dtype, device=device)
        dist.all_to_all_single(a_out, a_in)
        want = torch.cat([values(q, n * world, dtype, device)[rank * n:(rank + 1) * n] for q in range(world)])
        check(torch.equal(a_out, want), f"all_to_all_single {dtype}")
        send_splits = [rank + p + 1 for p in range(world)]
        recv_splits = [q + rank + 1 for q in range(world)]
        u_in = values(rank, sum(send_splits), dtype, device)
        u_out = torch.empty(sum(recv_splits), dtype=dtype, device=device)
        dist.all_to_all_single(u_out, u_in, recv_splits, send_splits)
        parts = []
        for q in range(world):
            start = sum(q + p + 1 for p in range(rank))
            parts.append(values(q, sum(q + p + 1 for p in range(world)), dtype, device)[start:start + q + rank + 1])
        check(torch.equal(u_out, torch.cat(parts)), f"all_to_all_single uneven {dtype}")
        # send/recv around a ring, batched into one group
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        got = torch.empty(n, dtype=dtype, device=device)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.irecv, got, prv), dist.P2POp(dist.isend, mine, nxt)])
        for r in reqs:
            r.wait()
        check(torch.equal(got, values(prv, n, dtype, device)), f"send/recv ring {dtype}")
    dist.barrier()
    torch.cuda.synchronize()
    dist.destroy_process_group()
    out.put((rank, checks, failures))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("collectives: skipped: no GPU visible")
        return 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    mp.start_processes(rank_main, args=(args.world, port, out), nprocs=args.world, start_method="spawn")
    bad = 0
    for _ in range(args.world):
        rank, checks, failures = out.get()
        bad += len(failures)
        print(f"collectives: rank {rank}: {checks} checks, {len(failures)} failed"
              + (f": {failures[:6]}" if failures else ""))
    print(f"collectives: {args.world} ranks: {'passed' if bad == 0 else 'FAILED'}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
