"""The Python checkpointer against PyTorch's own paths, one run, same state:
how long the training loop is blocked per save, how long until the save is
durable, and how long a restore from a cold page cache takes.

    PYTHONPATH=build/default/python /usr/bin/python3 tests/bench/bench_python_checkpoint.py [DIR]

Peers, all with the same threads as sigma's engine (torch.set_num_threads
to the core count; sigma's staging and writers use that many):
torch.save (synchronous; its best configuration, the default zip format),
torch.save followed by fsync (what durability costs it), torch's best
asynchronous form (the loop copies the state into tensors kept from the
last save, then a background thread runs torch.save + fsync, the next save
waiting for it: what async_save does where it exists), and
torch.distributed.checkpoint's save_state_dict with a FileSystemWriter
where it is importable (PyTorch 1.13 has no async_save). Every side times
the loop's blocked time and the time until durable on one clock, the
script's. The state is a model of about 24 M float32 parameters with AdamW
moments (~290 MiB), a training-like 1 % of the weights changed between
saves. Medians of 5 saves after one warm-up. Restores: a full base of the
same state against torch.load + load_state_dict (both into the live model
and optimizer, as a resume does), in paired rounds whose order alternates,
the page cache of both files dropped before each; the median of the
rounds' ratios.
"""

import os
import statistics
import sys
import tempfile
import threading
import time

import sigma
import torch

SAVES = 5


def state():
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(6)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 2048)).sum().backward()
    opt.step()
    return model, opt


def touch(model, i):
    with torch.no_grad():
        for p in model.parameters():
            flat = p.view(-1)
            n = max(1, flat.numel() // 100)
            flat[(i * n) % flat.numel() :][:n] += 1e-3


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def bench_sigma(model, opt, d, base_every):
    ck = sigma.Checkpointer(os.path.join(d, f"sigma-{base_every}"), keep=2, base_every=base_every)
    blocked, durable = [], []
    for i in range(SAVES + 1):
        touch(model, i)
        t0 = time.perf_counter()
        ck.save(i, model, opt)
        t1 = time.perf_counter()
        ck.wait()
        t2 = time.perf_counter()
        if i:
            blocked.append(t1 - t0)
            durable.append(t2 - t0)
    # What was measured is a checkpoint: it loads back bit-exactly.
    fresh = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(6)])
    assert ck.load_latest(fresh, torch.optim.AdamW(fresh.parameters())).step == SAVES
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))
    return statistics.median(blocked), statistics.median(durable)


def bench_torch_save(model, opt, d, sync):
    times = []
    for i in range(SAVES + 1):
        touch(model, i)
        path = os.path.join(d, f"torch-{i % 2}.pt")
        t0 = time.perf_counter()
        torch.save({"model": model.state_dict(), "optim": opt.state_dict()}, path)
        if sync:
            fsync_path(path)
        if i:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def state_tensors(model, opt):
    """Every tensor a save holds, by name: the weights and AdamW's state."""
    out = {f"model.{k}": v for k, v in model.state_dict().items()}
    for i, s in enumerate(opt.state.values()):
        for k, v in s.items():
            if torch.is_tensor(v):
                out[f"optim.{i}.{k}"] = v
    return out


def bench_torch_async(model, opt, d):
    """Copy into kept tensors (the loop's blocked time), then torch.save +
    fsync on a background thread. Like sigma's side, each save is waited
    for before the next, to time it until durable."""
    kept = {k: torch.empty_like(v) for k, v in state_tensors(model, opt).items()}
    blocked, durable = [], []
    for i in range(SAVES + 1):
        touch(model, i)
        path = os.path.join(d, f"torch-async-{i % 2}.pt")
        t0 = time.perf_counter()
        with torch.no_grad():
            for k, v in state_tensors(model, opt).items():
                kept[k].copy_(v)
        t1 = time.perf_counter()

        def write(path=path):
            torch.save(kept, path)
            fsync_path(path)

        writer = threading.Thread(target=write)
        writer.start()
        writer.join()
        t2 = time.perf_counter()
        if i:
            blocked.append(t1 - t0)
            durable.append(t2 - t0)
    # What was measured is the state: it loads back bit-exactly.
    back = torch.load(os.path.join(d, f"torch-async-{SAVES % 2}.pt"))
    assert all(torch.equal(back[k], v) for k, v in state_tensors(model, opt).items())
    return statistics.median(blocked), statistics.median(durable)


def drop_cache(top):
    for root, _, files in os.walk(top):
        for f in files:
            fd = os.open(os.path.join(root, f), os.O_RDONLY)
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def bench_restore(model, opt, d):
    """Paired cold restores into the live model and optimizer: sigma's
    load_latest of a full base, torch.load + load_state_dict of the same."""
    sdir, tpath = os.path.join(d, "restore-sigma"), os.path.join(d, "restore-torch.pt")
    ck = sigma.Checkpointer(sdir, keep=1, base_every=1, async_save=False)
    ck.save(0, model, opt)
    torch.save({"model": model.state_dict(), "optim": opt.state_dict()}, tpath)
    fsync_path(tpath)

    def run_sigma():
        drop_cache(sdir)
        t0 = time.perf_counter()
        ck.load_latest(model, opt)
        return time.perf_counter() - t0

    def run_torch():
        fd = os.open(tpath, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        t0 = time.perf_counter()
        back = torch.load(tpath)
        model.load_state_dict(back["model"])
        opt.load_state_dict(back["optim"])
        return time.perf_counter() - t0

    s, t = [], []
    for i in range(SAVES):
        if i % 2:
            t.append(run_torch())
            s.append(run_sigma())
        else:
            s.append(run_sigma())
            t.append(run_torch())
    return statistics.median(s), statistics.median(t), statistics.median(b / a for a, b in zip(s, t))


def bench_dcp(model, opt, d):
    try:
        import torch.distributed.checkpoint as dcp
    except ImportError:
        return None
    times = []
    for i in range(SAVES + 1):
        touch(model, i)
        path = os.path.join(d, f"dcp-{i}")
        t0 = time.perf_counter()
        dcp.save_state_dict(model.state_dict(), dcp.FileSystemWriter(path), no_dist=True)
        if i:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    # The same threads on both sides: sigma's engine stages and writes with
    # one thread a core; torch's copies and serialisation get as many.
    torch.set_num_threads(os.cpu_count())
    base = sys.argv[1] if len(sys.argv) > 1 else None
    model, opt = state()
    mib = sum(t.numel() * t.element_size() for t in list(model.state_dict().values())) / 2**20
    mib += sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values()) / 2**20
    with tempfile.TemporaryDirectory(dir=base) as d:
        s_blocked, s_durable = bench_sigma(model, opt, d, base_every=8)
        f_blocked, f_durable = bench_sigma(model, opt, d, base_every=1)
        t_save = bench_torch_save(model, opt, d, sync=False)
        t_sync = bench_torch_save(model, opt, d, sync=True)
        a_blocked, a_durable = bench_torch_async(model, opt, d)
        t_dcp = bench_dcp(model, opt, d)
        r_sigma, r_torch, r_ratio = bench_restore(model, opt, d)
    print(f"state: {mib:.0f} MiB (model + AdamW), {SAVES} saves, medians, {os.cpu_count()} threads on every side")
    print(f"{'path':44s} {'loop blocked':>12s} {'durable':>9s} {'blocked vs sigma':>16s}")
    print(f"{'sigma.Checkpointer (async, differential)':44s} {s_blocked:11.3f}s {s_durable:8.3f}s {1:15.1f}x")
    print(f"{'sigma.Checkpointer (async, every save a base)':44s} {f_blocked:11.3f}s {f_durable:8.3f}s "
          f"{f_blocked / s_blocked:15.1f}x")
    print(f"{'torch.save':44s} {t_save:11.3f}s {'(no)':>9s} {t_save / s_blocked:15.1f}x")
    print(f"{'torch.save + fsync':44s} {t_sync:11.3f}s {t_sync:8.3f}s {t_sync / s_blocked:15.1f}x")
    print(f"{'torch async (copy_ kept, save + fsync behind)':44s} {a_blocked:11.3f}s {a_durable:8.3f}s "
          f"{a_blocked / s_blocked:15.1f}x")
    print(f"restore, cold, into the live model and optimizer: sigma.Checkpointer.load_latest {r_sigma:.3f}s, "
          f"torch.load + load_state_dict {r_torch:.3f}s; torch / sigma {r_ratio:.2f} (paired rounds)")
    if t_dcp is None:
        print("torch.distributed.checkpoint: not importable here")
    else:
        print(f"{'torch.distributed.checkpoint (model only)':44s} {t_dcp:11.3f}s {'(no)':>9s} {t_dcp / s_blocked:15.1f}x")


if __name__ == "__main__":
    main()
