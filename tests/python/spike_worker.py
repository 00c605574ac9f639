"""A worker for test_session: data parallel under sigmarun with the
guardrails' spike detection; batch 30 is poisoned (its targets 100x), so the
loss spikes there and the session rolls back and skips its data. A state
item counts the steps finished: the rollback takes it back with the
snapshot, so it ends at the step count."""

import sys

import sigma
import torch

POISON = 30
CONFIG = "spike:\n  min_history: 5\n  window: 20\n  threshold: 6\n  skip_after: 2\nsdc:\n  interval: 1000\n"


def batch(index, rank, world):
    g = torch.Generator().manual_seed(index)
    x = torch.randn(32, 8, generator=g)[rank::world]
    y = x.sum(1, keepdim=True) * (100.0 if index == POISON else 1.0)
    return x, y


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
session = sigma.Session()
guard = sigma.Guardrails(session, config=CONFIG)
session.register(model, opt)
batches = []
applied = [0]


def restore_applied(data):
    applied[0] = int.from_bytes(data, "little")


session.add_state_item("applied", 8, lambda: applied[0].to_bytes(8, "little"), restore_applied)


def step_fn(step):
    b = session.batch(step)
    batches.append(b)
    x, y = batch(b, session.rank, session.world_size)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    session.average_gradients(model)
    if guard.step(model, loss, opt).action != "rollback":
        applied[0] += 1


done = session.run(60, step_fn)
if done is not None and session.rank == 0:
    after = batches[batches.index(POISON) + 1 :]
    assert POISON not in after, f"batch {POISON} trained on again after the rollback: {batches}"
    print(f"spike: rolled back; batches after the spike: {after[:6]}; applied {applied[0]}", flush=True)
sys.exit(0)
