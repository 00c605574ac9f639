"""A training process for test_checkpointer: checkpoints every 10 steps
with sigma.Checkpointer (in the background), resumes from the newest one
when restarted. Each step's line says the newest checkpoint committed by
then (-1: none)."""

import sys

import sigma
import torch

directory, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
ck = sigma.Checkpointer(directory, keep=2)
start = 0
loaded = ck.load_latest(model, opt)
if loaded is not None:
    start = loaded.extra["next_step"]
    print(f"resumed at step {start}", flush=True)
for step in range(start, 60):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(32, 16, generator=g)
    loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    committed = ck.steps()
    print(f"step {step} committed {committed[0] if committed else -1}", flush=True)
    if step % 10 == 0:
        ck.save(step, model, opt, extra={"next_step": step + 1})
ck.wait()
torch.save(model.state_dict(), out)
