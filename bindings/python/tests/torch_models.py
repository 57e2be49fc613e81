"""Models and a single-process reference trainer shared by dpl.torch tests."""

from __future__ import annotations

import copy

import torch


def mlp(widths, stages, dtype=torch.float64, seed=0):
    """A Linear+Tanh chain over ``widths`` cut into ``stages`` contiguous
    nn.Sequential parts (as even as the layer count allows)."""
    g = torch.Generator().manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        lin = torch.nn.Linear(a, b, dtype=dtype)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(b, a, generator=g, dtype=dtype) / a ** 0.5)
            lin.bias.copy_(torch.randn(b, generator=g, dtype=dtype) * 0.1)
        layers.append(lin)
        if i < len(widths) - 2:
            layers.append(torch.nn.Tanh())
    n = len(layers)
    cuts = [round(k * n / stages) for k in range(stages + 1)]
    return [torch.nn.Sequential(*layers[cuts[k]:cuts[k + 1]]) for k in range(stages)]


def data(batch, widths, iters, dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, widths[0], generator=g, dtype=dtype),
             torch.randn(batch, widths[-1], generator=g, dtype=dtype)) for _ in range(iters)]


def make_opt(name, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    return torch.optim.Adam(params, lr=0.01)


class Chain(torch.nn.Module):
    """``parts`` one after the other, as a pipeline runs them: a part that
    returns a tuple calls the next with it as positional arguments."""

    def __init__(self, parts):
        super().__init__()
        self.parts = torch.nn.ModuleList(parts)

    def forward(self, x):
        for p in self.parts:
            x = p(*x) if isinstance(x, tuple) else p(x)
        return x


def reference(parts, batches, microbatches, opt_name, loss_fn=torch.nn.MSELoss()):
    """Train copies of ``parts`` as one model in one process with PyTorch's
    pipelining semantics (per-micro-batch losses, gradients / M) and return
    the trained parts and the per-iteration micro-batch losses."""
    parts = copy.deepcopy(parts)
    model = Chain(parts)
    opt = make_opt(opt_name, model.parameters())
    all_losses = []
    for x, y in batches:
        opt.zero_grad()
        losses = []
        for xs, ys in zip(torch.tensor_split(x, microbatches), torch.tensor_split(y, microbatches)):
            loss = loss_fn(model(xs), ys)
            loss.backward()
            losses.append(loss.detach())
        for p in model.parameters():
            p.grad.div_(microbatches)
        opt.step()
        all_losses.append(losses)
    return parts, all_losses


V_SHAPED = ("zbv", "dualpipev")   # rank r holds stages r and 2P-1-r


def stages_of_rank(policy, reps, V, rank):
    """The stages world ``rank`` holds under ``policy`` with ``reps``
    replicas per pipeline rank and ``V`` stages per rank."""
    from dpl.torch import stage_of
    P = len(reps)
    p, _ = stage_of(rank, reps)
    if policy in V_SHAPED:
        return [p, 2 * P - 1 - p]
    return [p + k * P for k in range(V)]


def max_rel_diff(a_params, b_params):
    worst = 0.0
    for a, b in zip(a_params, b_params):
        d = (a.detach() - b.detach()).abs().max().item()
        s = max(b.detach().abs().max().item(), 1e-30)
        worst = max(worst, d / s)
    return worst
