"""Stages that hand the next stage a tuple of tensors, as PyTorch's stages
may: of mixed dtypes (f64, f32, int64, bool), of per-sample shape () and
(k,), some without gradient (integer tensors, a float computed from the
inputs alone). Training equals single-process torch on every kind of
policy and layout, uneven replica counts included (their split-concat
moves ranges of samples, so a sample's tensors must travel together);
``eval`` and a last stage that returns a tuple; and the errors of each."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import dpl  # noqa: E402
import dpl.run  # noqa: E402
from dpl.torch import PipelineStage, Schedule1F1B, ScheduleDAPPLE  # noqa: E402

from torch_models import (Chain, make_opt, max_rel_diff, reference,  # noqa: E402
                          stages_of_rank)

D_IN, D, D_OUT = 5, 8, 3


def _lin(a, b, g):
    lin = torch.nn.Linear(a, b, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(b, a, generator=g, dtype=torch.float64) / a ** 0.5)
        lin.bias.copy_(torch.randn(b, generator=g, dtype=torch.float64) * 0.1)
    return lin


class First(torch.nn.Module):
    """x -> (h f64 [D], flag bool [], side f32 [2]); side depends on the
    input alone, so it has no gradient on this stage."""

    def __init__(self, g):
        super().__init__()
        self.lin = _lin(D_IN, D, g)

    def forward(self, x):
        return torch.tanh(self.lin(x)), x[:, 0] > 0, (x[:, :2] * 2).float()


class Mid(torch.nn.Module):
    """(h, flag, side) -> (h2 f64 [D], flag int64 [], h2 as f32 [D]): two
    outputs of the same tensor, so its input gradient sums both paths."""

    def __init__(self, k, g):
        super().__init__()
        self.a = _lin(D, D, g)
        self.b = _lin(k, D, g)

    def forward(self, h, flag, side):
        h2 = torch.tanh(self.a(h) + self.b(side.double())) * (1 + flag.double().unsqueeze(1))
        return h2, flag.long(), h2.float()


class Tail(torch.nn.Module):
    def __init__(self, k, g, tuple_out=False):
        super().__init__()
        self.a = _lin(D, D_OUT, g)
        self.b = _lin(k, D_OUT, g)
        self.tuple_out = tuple_out

    def forward(self, h, flag, side):
        out = self.a(h) + self.b(side.double()) * flag.double().unsqueeze(1)
        return (out, flag.long()) if self.tuple_out else out


def parts_of(S, seed=0, tuple_out=False):
    g = torch.Generator().manual_seed(seed)
    parts = [First(g)]
    for s in range(1, S - 1):
        parts.append(Mid(2 if s == 1 else D, g))
    parts.append(Tail(2 if S == 2 else D, g, tuple_out))
    return parts


def batches_of(batch, iters, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, D_IN, generator=g, dtype=torch.float64),
             torch.randn(batch, D_OUT, generator=g, dtype=torch.float64)) for _ in range(iters)]



def train_rank(parts, batches, reps, V, policy, M, opt_name):
    """Train on every batch but the last, then eval on the last: the
    trained parameters and what eval returned."""
    w = dpl.world.current()
    mine = stages_of_rank(policy, reps, V, w.rank)
    S = len(parts)
    mods = [copy.deepcopy(parts[s]) for s in mine]
    stages = [PipelineStage(m, s, S) for m, s in zip(mods, mine)]
    sched = ScheduleDAPPLE(stages if len(stages) > 1 else stages[0], M, torch.nn.MSELoss(),
                           replicas=reps, policy=policy)
    opt = make_opt(opt_name, [q for m in mods for q in m.parameters()])
    first, last = 0 in mine, S - 1 in mine
    try:
        for x, y in batches[:-1]:
            opt.zero_grad()
            sched.step(*((x,) if first else ()), target=y if last else None)
            opt.step()
        x, y = batches[-1]
        losses = []
        out = sched.eval(*((x,) if first else ()), target=y if last else None, losses=losses)
    finally:
        sched.close()
    return {s: list(m.parameters()) for s, m in zip(mine, mods)}, out


# (policy, replicas per pipeline rank, stages per rank, M)
CASES = [
    ("gpipe", [1, 1, 1], 1, 4),
    ("1f1b", [1, 1, 1], 1, 2),        # M < S
    ("zb-h1", [1, 1, 1], 1, 5),       # input and weight gradients apart
    ("1f1b", [2, 1], 1, 5),           # split-concat: 2 replicas send to 1
    ("1f1b", [1, 3], 1, 5),           # 1 sends to 3, M not divisible by them
    ("1f1b", [2, 2], 1, 3),
    ("interleaved", [1, 1], 2, 4),
    ("interleaved-zb", [1, 1], 2, 4),
    ("zbv", [1, 1], 2, 5),
    ("dualpipev", [2, 1], 2, 5),
]


@pytest.mark.parametrize("policy,reps,V,M", CASES)
def test_tuples_between_stages_train_like_one_process(policy, reps, V, M):
    S = len(reps) * V
    parts = parts_of(S)
    batches = batches_of(12, 3)
    # the inputs make both values of the flag in every micro-batch
    assert all(0 < int((x[:, 0] > 0).sum()) < len(x) for x, _ in batches)
    ref, _ = reference(parts, batches[:-1], M, "sgd")
    with torch.no_grad():
        want = Chain(copy.deepcopy(ref))(batches[-1][0])
    res = dpl.run.threads(sum(reps), train_rank, parts, batches, reps, V, policy, M, "sgd",
                          timeout=120)
    worst = max(max_rel_diff(ps, list(ref[s].parameters()))
                for params, _ in res for s, ps in params.items())
    assert worst <= 1e-10, f"{policy} {reps}: max rel diff {worst:.3g}"
    outs = [o for _, o in res if o is not None]
    rows = torch.cat(outs)
    assert rows.shape == want.shape
    rows, want = rows[rows[:, 0].argsort()], want[want[:, 0].argsort()]
    assert max_rel_diff([rows], [want]) <= 1e-10


def test_tuples_between_stages_with_adam_on_two_ranks():
    parts = parts_of(2)
    batches = batches_of(9, 4)
    ref, _ = reference(parts, batches[:-1], 3, "adam")
    res = dpl.run.threads(2, train_rank, parts, batches, [1, 1], 1, "1f1b", 3, "adam",
                          timeout=60)
    worst = max(max_rel_diff(ps, list(ref[s].parameters()))
                for params, _ in res for s, ps in params.items())
    assert worst <= 1e-10


def tuple_out_rank(parts, batch, M, mode):
    w = dpl.world.current()
    st = PipelineStage(copy.deepcopy(parts[w.rank]), w.rank, 2)
    sched = Schedule1F1B(st, M, lambda o, y: torch.nn.functional.mse_loss(o[0], y))
    x, y = batch
    try:
        call = sched.step if mode == "step" else sched.eval
        out = call(x) if w.rank == 0 else call(target=y)
    finally:
        sched.close()
    return out


@pytest.mark.parametrize("mode", ["step", "eval"])
def test_a_last_stage_returning_a_tuple_returns_it_merged(mode):
    parts = parts_of(2, tuple_out=True)
    x, y = batches_of(10, 1)[0]
    got = dpl.run.threads(2, tuple_out_rank, parts, (x, y), 4, mode, timeout=60)[1]
    with torch.no_grad():
        want_out, want_flag = Chain(parts)(x)
    assert isinstance(got, tuple) and len(got) == 2
    assert max_rel_diff([got[0]], [want_out]) <= 1e-12
    assert got[1].dtype == torch.int64 and torch.equal(got[1], want_flag)
    assert got[0].grad_fn is None


class Varying(torch.nn.Module):
    """Stage 0 returning what ``bad`` says on its second call."""

    def __init__(self, bad):
        super().__init__()
        self.lin = torch.nn.Linear(D_IN, D, dtype=torch.float64)
        self.bad, self.calls = bad, 0

    def forward(self, x):
        self.calls += x.device.type != "meta"   # not the set-up's dry run
        h = self.lin(x)
        if self.calls > 1 and self.bad == "shorter":
            return (h,)
        if self.calls > 1 and self.bad == "not a tensor":
            return h, None
        if self.calls > 1 and self.bad == "dtype":
            return h, (x[:, 0] > 0).int()
        return h, x[:, 0] > 0


class Sink(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(D, D_OUT, dtype=torch.float64)

    def forward(self, h, flag=None):
        return self.lin(h)


def _per_rank(n, fn, *args):
    """Each rank's exception (None where it returned), from dpl.run.threads."""
    seen: dict = {}

    def wrap(*a):
        try:
            return fn(*a)
        except BaseException as e:  # noqa: BLE001
            seen[dpl.run.rank()] = e
            raise

    with pytest.raises(BaseException):
        dpl.run.threads(n, wrap, *args, timeout=60)
    return [seen.get(r) for r in range(n)]


def bad_rank(bad, x, y, input_args=None):
    w = dpl.world.current()
    mod = Varying(bad) if w.rank == 0 else Sink()
    st = PipelineStage(mod, w.rank, 2, input_args=input_args if w.rank == 1 else None)
    sched = Schedule1F1B(st, 2, torch.nn.MSELoss(), timeout=10)
    try:
        sched.step(x) if w.rank == 0 else sched.step(target=y)
    finally:
        sched.close()


@pytest.mark.parametrize("bad,msg", [
    ("shorter", "stage 0 micro-batch 1: returned 1 values, the first step returned 2"),
    ("not a tensor", "stage 0 returned NoneType as output 1"),
    ("dtype", "stage 0 micro-batch 1: output 1 (3,) torch.int32, expected (3,) torch.bool"),
])
def test_a_stage_whose_outputs_change_is_refused_naming_them(bad, msg):
    x, y = batches_of(6, 1)[0]
    res = _per_rank(2, bad_rank, bad, x, y)
    assert isinstance(res[0], dpl.InvalidArgument), res[0]
    assert msg in str(res[0])
    assert isinstance(res[1], dpl.PeerError) and "rank 0" in str(res[1])


def test_input_args_that_disagree_with_what_the_previous_stage_sends_are_refused():
    x, y = batches_of(6, 1)[0]
    wrong = (torch.zeros(3, D, dtype=torch.float64), torch.zeros(3, dtype=torch.int64))
    res = _per_rank(2, bad_rank, "none", x, y, wrong)
    err = res[1]
    assert isinstance(err, dpl.InvalidArgument), err
    assert "stage 1: input_args describe" in str(err) and "torch.int64" in str(err)
    assert "stage 0 sends" in str(err) and "torch.bool" in str(err)


def test_an_output_that_is_not_a_tensor_is_refused_at_set_up():
    def rank(x):
        w = dpl.world.current()

        class Odd(torch.nn.Module):
            def forward(self, x):
                return x * 2, "label"

        mod = Odd() if w.rank == 0 else Sink()
        sched = Schedule1F1B(PipelineStage(mod, w.rank, 2), 2, timeout=10)
        try:
            sched.step(x) if w.rank == 0 else sched.step()
        finally:
            sched.close()

    x = batches_of(4, 1)[0][0]
    res = _per_rank(2, rank, x)
    assert isinstance(res[0], dpl.InvalidArgument)
    assert "stage 0 returned str as output 1" in str(res[0])
