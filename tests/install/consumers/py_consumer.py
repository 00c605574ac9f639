"""A Python consumer of the installed package: imports `sigma` from the
install prefix only and round-trips a model through its checkpointer."""

import os
import sys
import tempfile

import sigma
import torch

prefix = sys.argv[1]
assert os.path.realpath(sigma.__file__).startswith(os.path.realpath(prefix)), sigma.__file__
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
with tempfile.TemporaryDirectory() as d:
    ck = sigma.Checkpointer(d, async_save=False)
    ck.save(1, model, opt, extra={"from": "installed"})
    fresh = torch.nn.Linear(4, 2)
    loaded = ck.load_latest(fresh, torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9))
assert loaded.extra == {"from": "installed"} and torch.equal(fresh.weight, model.weight)
try:
    sigma.Checkpointer(d, keep=0)
    sys.exit("keep=0 accepted")
except sigma.InvalidArgumentError:
    pass
print("python consumer: ok")
