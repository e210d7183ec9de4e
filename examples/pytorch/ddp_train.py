"""PyTorch DistributedDataParallel on ark's NCCL API, unmodified: backend "nccl", with ark's
libnccl.so.2 preloaded (PyTorch finds NCCL through an RPATH, so LD_LIBRARY_PATH cannot swap it):

    LD_PRELOAD=<build>/apps/nccl/libnccl.so.2 python3 examples/pytorch/ddp_train.py --world 2

Trains a small MLP for --steps steps with every rank on its shard of a fixed batch, then checks
that the parameters match the same training run in one process on the whole batch (DDP averages
the ranks' gradients, so the two agree up to float rounding). Ranks use GPU rank % (GPU count):
with more ranks than GPUs they share one, which NCCL itself refuses and ark serves.
"""
import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def make_model():
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 256),
                               torch.nn.GELU(), torch.nn.Linear(256, 10))


def batch(device):
    g = torch.Generator().manual_seed(42)
    x = torch.randn(96, 64, generator=g)
    y = torch.randint(0, 10, (96,), generator=g)
    return x.to(device), y.to(device)


def train(model, x, y, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    return loss.item()


def rank_main(rank, world, port, steps, out):
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=device)
    x, y = batch(device)
    shard = x.shape[0] // world
    model = DDP(make_model().to(device), device_ids=[device.index])
    loss = train(model, x[rank * shard:(rank + 1) * shard], y[rank * shard:(rank + 1) * shard], steps)
    params = torch.cat([p.detach().flatten() for p in model.module.parameters()])
    # every rank holds the same parameters: DDP keeps them in step
    gathered = [torch.empty_like(params) for _ in range(world)]
    dist.all_gather(gathered, params)
    same = all(torch.equal(g, params) for g in gathered)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        reference = make_model().to(device)
        train(reference, x, y, steps)
        ref = torch.cat([p.detach().flatten() for p in reference.parameters()])
        diff = (params - ref).abs().max().item()
        out.put((same, diff, loss))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("ddp_train: skipped: no GPU visible")
        return 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    mp.start_processes(rank_main, args=(args.world, port, args.steps, out), nprocs=args.world, start_method="spawn")
    same, diff, loss = out.get()
    ok = same and diff < 1e-3
    print(f"ddp_train: {args.world} ranks, {args.steps} steps, loss {loss:.4f}; ranks agree: {same}; "
          f"largest difference from one-process training: {diff:.2e}: {'passed' if ok else 'FAILED'}")
    preloaded = os.environ.get("LD_PRELOAD", "")
    print(f"ddp_train: NCCL library: {preloaded or 'PyTorch default (not ark)'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
