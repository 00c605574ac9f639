"""A DistributedDataParallel script in the shape of PyTorch's DDP tutorial:
a small MLP learns a fixed random teacher network, each rank its slice of
every batch. train_ddp.py runs under torchrun (torch's gloo backend);
train_ddp_sigma.py, the same with libsigma, under sigmarun, where it
survives a killed or hung worker. `diff -w` between the two is what
adopting libsigma takes (docs/python.md)."""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class ToyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = torch.nn.Linear(32, 128)
        self.relu = torch.nn.ReLU()
        self.net2 = torch.nn.Linear(128, 1)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def teacher(x):
    g = torch.Generator().manual_seed(7)
    w1, w2 = torch.randn(32, 64, generator=g), torch.randn(64, 1, generator=g)
    return torch.tanh(x @ w1 / 32**0.5) @ w2 / 8


def batch(index, rank, world, size=64):
    """Batch `index`; each rank of `world` takes its own slice of it."""
    g = torch.Generator().manual_seed(1000 + index)
    x = torch.randn(size, 32, generator=g)[rank::world]
    return x, teacher(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--out", help="rank 0 writes the final parameters here")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = DDP(ToyModel())
    loss_fn = torch.nn.MSELoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

    def train_step(step):
        x, y = batch(step, rank, world)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if rank == 0 and step % 50 == 0:
            print(f"step {step} loss {loss.item():.5f}", flush=True)

    for step in range(args.steps):
        train_step(step)
    if args.out and rank == 0:
        torch.save(model.module.state_dict(), args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
