"""The main job's model under torchrun, for the recovery benchmark: the
same byte-level MoE transformer as samples/moe_trainer (4 layers, d_model
128, 4 heads, 8 experts of FFN 256, top-2, sequence 64, 8 sequences per
rank), experts sharded over the ranks and their tokens exchanged with gloo
all_to_all_single (dropless), dense gradients all-reduced, AdamW, each
rank's state saved with torch.save every CKPT_EVERY steps: how a torchrun
user recovers.

  torchrun ... torchrun_moe.py TEXT STEPS CKPT_EVERY CKPT_DIR LOG_PREFIX KILL_STEP KILL_RANK

The process of rank KILL_RANK sends itself SIGKILL when it starts step
KILL_STEP in the first incarnation of the job only. Each process appends
"step N T" / "kill T" (T: CLOCK_MONOTONIC seconds) to LOG_PREFIX.rR.
"""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

L, D, H, FF, E, K, S, B, V = 4, 128, 4, 256, 8, 2, 64, 8, 256


class Exchange(torch.autograd.Function):
    """all_to_all_single with autograd: backward sends the gradients home."""

    @staticmethod
    def forward(ctx, rows, send, recv):
        ctx.send, ctx.recv = send, recv
        out = rows.new_empty((sum(recv), rows.shape[1]))
        dist.all_to_all_single(out, rows.contiguous(), recv, send)
        return out

    @staticmethod
    def backward(ctx, grad):
        back = grad.new_empty((sum(ctx.send), grad.shape[1]))
        dist.all_to_all_single(back, grad.contiguous(), ctx.send, ctx.recv)
        return back, None, None


def exchange_counts(send):
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)
    return recv


class Model(torch.nn.Module):
    def __init__(self, rank, world):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        p = lambda *shape, std=0.02: torch.nn.Parameter(torch.randn(*shape, generator=g) * std)
        self.local = E // world
        self.embed, self.pos = p(V, D), p(S, D)
        self.blocks = torch.nn.ModuleList()
        for _ in range(L):
            b = torch.nn.Module()
            b.ln1, b.ln2 = torch.nn.LayerNorm(D), torch.nn.LayerNorm(D)
            b.qkv, b.proj, b.router = p(3 * D, D), p(D, D), p(E, D)
            b.w1, b.w2 = p(self.local, FF, D), p(self.local, D, FF)
            self.blocks.append(b)
        self.lnf = torch.nn.LayerNorm(D)
        self.world = world

    def dense(self):
        return [q for n, q in self.named_parameters() if not (n.endswith(".w1") or n.endswith(".w2"))]

    def moe(self, b, h):
        probs = torch.softmax(h @ b.router.t(), -1)
        w, ids = probs.topk(K, -1)
        ids, w = ids.reshape(-1), w.reshape(-1)
        order = torch.argsort(ids, stable=True)
        token = order // K
        send = torch.bincount(ids // self.local, minlength=self.world)
        recv = exchange_counts(send)
        sent_ids = ids[order]
        got_ids = torch.empty(int(recv.sum()), dtype=torch.long)
        dist.all_to_all_single(got_ids, sent_ids, recv.tolist(), send.tolist())
        rows = Exchange.apply(h[token], send.tolist(), recv.tolist())
        local = got_ids % self.local
        out = torch.zeros_like(rows)
        for j in range(self.local):
            m = local == j
            out = out.index_put((m.nonzero().squeeze(1),), F.gelu(rows[m] @ b.w1[j].t()) @ b.w2[j].t())
        back = Exchange.apply(out, recv.tolist(), send.tolist())
        y = torch.zeros_like(h).index_add(0, token, back * w[order].unsqueeze(1))
        return y

    def forward(self, x, t):
        Bn = x.shape[0]
        h = self.embed[x] + self.pos
        mask = torch.ones(S, S, dtype=torch.bool).triu(1)
        for b in self.blocks:
            a = b.ln1(h)
            q, k, v = (a @ b.qkv.t()).view(Bn, S, 3, H, D // H).permute(2, 0, 3, 1, 4)
            att = torch.softmax((q @ k.transpose(-2, -1) / (D // H) ** 0.5).masked_fill(mask, float("-inf")), -1)
            h = h + (att @ v).transpose(1, 2).reshape(Bn, S, D) @ b.proj.t()
            h = h + self.moe(b, b.ln2(h).reshape(-1, D)).view(Bn, S, D)
        logits = self.lnf(h) @ self.embed.t()
        return F.cross_entropy(logits.view(-1, V), t.reshape(-1))


def batch(data, step, rank):
    g = torch.Generator().manual_seed(step * 1000003 + rank)
    at = torch.randint(0, len(data) - S - 1, (B,), generator=g).tolist()
    rows = torch.tensor([list(data[a : a + S + 1]) for a in at])
    return rows[:, :S], rows[:, 1:]


def main():
    text, steps, ckpt_every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ckpt_dir, log_prefix = sys.argv[4], sys.argv[5]
    kill_step, kill_rank = int(sys.argv[6]), int(sys.argv[7])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    first = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    data = open(text, "rb").read()
    model = Model(rank, world)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    start = 0
    path = os.path.join(ckpt_dir, "rank%d.pt" % rank)
    if os.path.exists(path):
        state = torch.load(path)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    log = open("%s.r%d" % (log_prefix, rank), "a")
    for step in range(start, steps):
        if first and step == kill_step and rank == kill_rank:
            log.write("kill %.6f\n" % time.clock_gettime(time.CLOCK_MONOTONIC))
            log.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        (model(*batch(data, step, rank)) / world).backward()
        grads = [q.grad for q in model.dense()]
        flat = torch.cat([g.reshape(-1) for g in grads])  # one all-reduce, as DDP's bucket
        dist.all_reduce(flat)
        at = 0
        for g in grads:
            g.copy_(flat[at : at + g.numel()].view_as(g))
            at += g.numel()
        opt.step()
        log.write("step %d %.6f\n" % (step, time.clock_gettime(time.CLOCK_MONOTONIC)))
        log.flush()
        if (step + 1) % ckpt_every == 0:
            tmp = path + ".tmp"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1}, tmp)
            os.replace(tmp, path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
