"""A small Llama-style model (token embedding; blocks of RMSNorm, causal attention with rotary
position embedding and SwiGLU MLP; final norm and output projection) for the FSDP tests and
benchmark. Sizes are deliberately uneven; by default a block's bucket (113 KiB) is gathered
point-to-point and the root's (39 KiB) by Gloo's ring (all_gather_v's two routes)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary(x, cos, sin):
    """x: (batch, heads, seq, head_dim); rotates the two halves of head_dim."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.head_dim = dim // heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x, cos, sin):
        b, s, d = x.shape
        # Heads counted from the projections' width: all of them, or this rank's under tensor
        # parallelism (wq / wk / wv column-sharded, their local outputs).
        split = lambda t: t.view(b, s, -1, self.head_dim).transpose(1, 2)
        q, k, v = split(self.wq(x)), split(self.wk(x)), split(self.wv(x))
        q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.attention_norm = RMSNorm(dim)
        self.attention = Attention(dim, heads)
        self.ffn_norm = RMSNorm(dim)
        self.feed_forward = MLP(dim, hidden)

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, vocab=101, dim=48, heads=3, hidden=136, layers=3, seq=16):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        half = dim // heads // 2
        freqs = 1.0 / (10000 ** (torch.arange(half, dtype=torch.float32) / half))
        angles = torch.outer(torch.arange(seq, dtype=torch.float32), freqs)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, tokens):
        s = tokens.shape[1]
        h = self.tok_embeddings(tokens)
        cos, sin = self.cos[:s].to(h.dtype), self.sin[:s].to(h.dtype)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.output(self.norm(h))


def tensor_parallel(model, tp_mesh, tp, replicate=None):
    """Megatron-style tensor parallelism on `tp_mesh` with the module `tp` (hyper.tp or
    torch.distributed.tensor.parallel: the same names): q / k / v and w1 / w3 column-wise,
    wo and w2 row-wise. `replicate(tensor, tp_mesh)`, when given, turns every other parameter
    into a Replicate DTensor on the tp mesh (hyper's fully_shard takes a bucket's parameters
    all tensor parallel or none)."""
    for block in model.layers:
        tp.parallelize_module(block, tp_mesh, {
            "attention.wq": tp.ColwiseParallel(), "attention.wk": tp.ColwiseParallel(),
            "attention.wv": tp.ColwiseParallel(), "attention.wo": tp.RowwiseParallel(),
            "feed_forward.w1": tp.ColwiseParallel(), "feed_forward.w3": tp.ColwiseParallel(),
            "feed_forward.w2": tp.RowwiseParallel()})
    if replicate is not None:
        import hyper
        for m in model.modules():
            for name, p in list(m._parameters.items()):
                if p is not None and not hyper.is_dtensor(p):
                    m.register_parameter(name, nn.Parameter(replicate(p.detach(), tp_mesh)))
    return model


def loss_of(model, tokens):
    """Next-token cross entropy (mean over the batch's positions)."""
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                           tokens[:, 1:].reshape(-1))


def batch(step, ranks, per_rank, seq=16, vocab=101):
    """The global batch of a step (the same on every rank): rank r trains on rows
    [r * per_rank, (r + 1) * per_rank)."""
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randint(0, vocab, (ranks * per_rank, seq + 1), generator=g)
