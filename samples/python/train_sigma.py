"""A plain PyTorch training loop: a small MLP learns a fixed random teacher
network. train_sigma.py is the same script with libsigma added; the diff
between the two is what adopting it takes (docs/python.md)."""

import argparse

import sigma
import torch


def teacher(x):
    g = torch.Generator().manual_seed(7)
    w1, w2 = torch.randn(32, 64, generator=g), torch.randn(64, 1, generator=g)
    return torch.tanh(x @ w1) @ w2 / 8


def batch(index, rank=0, world=1, size=64):
    """Batch `index`; each rank of `world` takes its own slice of it."""
    g = torch.Generator().manual_seed(1000 + index)
    x = torch.randn(size, 32, generator=g)[rank::world]
    return x, teacher(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--out", help="write the final parameters here (rank 0; rank R to OUT.rankR)")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.GELU(), torch.nn.Linear(128, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    session = sigma.Session()  # from sigmarun: a rank, heartbeats, restore after a failure
    guard = sigma.Guardrails(session)  # skip NaN steps, clip, roll back loss spikes
    session.register(model, optimizer)  # what the memory tier and checkpoints keep

    def train_step(step):
        optimizer.zero_grad()
        loss = torch.zeros(())
        # This rank's slice of the batch; under contained recovery its
        # replica's share, a stopped replica's among them (or none).
        for part, of in session.shards():
            x, y = batch(session.batch(step), part, of)
            loss = loss + torch.nn.functional.mse_loss(model(x), y)
        if loss.requires_grad:
            loss.backward()
        session.average_gradients(model)  # data parallel, through the HAL
        guard.step(model, loss, optimizer)  # instead of optimizer.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.5f}", flush=True)

    if session.run(args.steps, train_step) is None:
        return  # a spare the job never needed, or moved off a failing device
    if args.out:
        torch.save(model.state_dict(), args.out if session.rank == 0 else f"{args.out}.rank{session.rank}")


if __name__ == "__main__":
    main()
