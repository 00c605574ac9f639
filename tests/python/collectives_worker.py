"""A worker for test_session: the HAL's collectives on torch tensors under
sigmarun, checked against what they must give, and the GIL released while
one waits for a late peer. Exits non-zero on any wrong answer."""

import sys
import threading
import time

import sigma
import torch

session = sigma.Session()
state = torch.zeros(4)
session.register(tensors={"w": state})
session.join()
rank, world = session.rank, session.world_size

t = torch.full((1000,), float(rank + 1))
session.all_reduce(t)
assert torch.equal(t, torch.full((1000,), float(sum(range(1, world + 1))))), t[:4]

m = torch.tensor([rank, -rank], dtype=torch.int64)
session.all_reduce(m, op="max")
assert m.tolist() == [world - 1, 0], m

b = torch.arange(6, dtype=torch.float64) * (rank + 1)
session.broadcast(b, root=world - 1)
assert torch.equal(b, torch.arange(6, dtype=torch.float64) * world), b

gathered = session.all_gather(torch.tensor([rank, rank * 10], dtype=torch.int32))
assert gathered.tolist() == [[r, r * 10] for r in range(world)], gathered

try:
    session.all_reduce(t, op="median")
    sys.exit("an unknown op was accepted")
except sigma.InvalidArgumentError as e:
    assert "median" in str(e)
try:
    session.all_reduce(torch.zeros(4, 4).t())
    sys.exit("a non-contiguous tensor was accepted")
except sigma.InvalidArgumentError as e:
    assert "contiguous" in str(e)

# Rank 0 waits in an all-reduce for rank 1, which comes 1 s late; a second
# thread of rank 0 must keep running meanwhile.
ticks = []
stop = threading.Event()


def count():
    while not stop.is_set():
        ticks.append(time.monotonic())
        time.sleep(0.001)


session.all_reduce(torch.ones(1))  # both ranks here together
if rank == 1:
    time.sleep(1.0)
counter = threading.Thread(target=count)
counter.start()
t0 = time.monotonic()
session.all_reduce(torch.ones(8))
t1 = time.monotonic()
stop.set()
counter.join()
if rank == 0:
    during = sum(1 for x in ticks if t0 < x < t1)
    assert t1 - t0 > 0.3, f"rank 0 did not wait ({t1 - t0:.2f} s)"
    assert during > 20, f"{during} ticks of a second thread in {t1 - t0:.2f} s: the GIL was held"
    print(f"collectives: all correct; {during} ticks of a second thread while waiting {t1 - t0:.2f} s", flush=True)
# A registered tensor whose storage was replaced would be snapshotted from
# freed memory: refused, naming it.
state.set_(torch.zeros(4))
try:
    session.step_end(0)
    sys.exit("a registered tensor that moved was accepted")
except sigma.InvalidArgumentError as e:
    assert "user/w" in str(e), e
session.finish(0)
