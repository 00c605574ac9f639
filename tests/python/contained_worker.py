"""A worker for test_session's contained recovery: the sample's model and
data, each step's batch cut into one shard per replica
(``Session.shards``); a replica computes the shards it holds now, sums
their mean losses and exchanges gradients over the live replicas
(``Session.average_gradients``). Each rank appends "step S batch B live L
shards m1 m2 ..." to JOB_DIR/steps-rank-R.txt per step, and rank 0 saves
the final parameters to --out.

    contained_worker.py --steps N --out PATH [--kill-at STEP --kill-device D] [--step-ms MS]

--kill-at: the process on device D sends itself SIGKILL when it starts
step STEP (the first time only). --step-ms: a step's compute time for the
whole batch (a replica sleeps its share of it).
"""

import argparse
import os
import signal
import time

import sigma
import torch


def teacher(x):
    g = torch.Generator().manual_seed(7)
    w1, w2 = torch.randn(32, 64, generator=g), torch.randn(64, 1, generator=g)
    return torch.tanh(x @ w1) @ w2 / 8


def shard(index, part, of, size=64):
    g = torch.Generator().manual_seed(1000 + index)
    x = torch.randn(size, 32, generator=g)[part::of]
    return x, teacher(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--kill-at", type=int, default=-1)
    parser.add_argument("--kill-device", type=int, default=-1)
    parser.add_argument("--step-ms", type=float, default=0.0)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    device = int(os.environ["SIGMA_DEVICE"])
    job_dir = os.environ["SIGMA_JOB_DIR"]
    model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.GELU(), torch.nn.Linear(128, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    session = sigma.Session()
    session.register(model, optimizer)

    def train_step(step):
        if step == args.kill_at and device == args.kill_device:
            os.kill(os.getpid(), signal.SIGKILL)
        index = session.batch(step)
        shards = session.shards()
        optimizer.zero_grad()
        loss = torch.zeros(())
        for part, of in shards:
            x, y = shard(index, part, of)
            loss = loss + torch.nn.functional.mse_loss(model(x), y)
        if shards:
            loss.backward()
        if args.step_ms > 0:
            time.sleep(args.step_ms / 1000 * len(shards) / session.replicas.count)
        session.average_gradients(model)  # a void step raises here; run() runs it again
        optimizer.step()
        live = len(session.replicas.live)
        with open(os.path.join(job_dir, f"steps-rank-{session.rank}.txt"), "a", encoding="utf-8") as f:
            f.write(f"step {step} batch {index} live {live} shards {' '.join(str(p) for p, _ in shards)}\n")

    if session.run(args.steps, train_step) is None:
        return
    if session.rank == 0:
        torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
