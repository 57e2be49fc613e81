"""What a dpl.torch user sees on bad arguments and failures: the exception
class and a message naming the bad value."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import dpl  # noqa: E402
import dpl.run  # noqa: E402
from dpl.torch import (PipelineStage, Schedule1F1B, ScheduleDAPPLE,  # noqa: E402
                       ScheduleGPipe, stage_of)


def lin(a=4, b=4, dtype=torch.float64):
    return torch.nn.Linear(a, b, dtype=dtype)


@pytest.mark.parametrize("kw,needle", [
    (dict(stage_index=4, num_stages=4), "stage_index must be in [0, 4) (got 4)"),
    (dict(stage_index=-1, num_stages=4), "(got -1)"),
    (dict(stage_index=0, num_stages=0), "num_stages must be >= 1 (got 0)"),
    (dict(stage_index="0", num_stages=2), "stage_index must be an int (got '0')"),
    (dict(stage_index=0, num_stages=2, device="cuda:0"),
     "device 'cuda:0': dpl.torch runs stages on the CPU only"),
])
def test_pipeline_stage_bad_arguments(kw, needle):
    with pytest.raises(dpl.InvalidArgument) as e:
        PipelineStage(lin(), **kw)
    assert needle in str(e.value)


def test_submodule_must_be_a_module():
    with pytest.raises(dpl.InvalidArgument, match="must be an nn.Module .got int"):
        PipelineStage(3, 0, 1)


@pytest.mark.parametrize("m", [0, -2, 1.5, True])
def test_bad_microbatch_count(m):
    with pytest.raises(dpl.InvalidArgument) as e:
        Schedule1F1B(PipelineStage(lin(), 0, 1), m, loss_fn=torch.nn.MSELoss())
    assert f"n_microbatches must be an int >= 1 (got {m!r})" in str(e.value)


def test_without_loss_fn_a_step_is_forward_only():
    # as PyTorch: no loss_fn, no backward (it used to be refused here)
    mod = lin()
    s = ScheduleGPipe(PipelineStage(mod, 0, 1), 2)
    x = torch.ones(4, 4, dtype=torch.float64)
    try:
        out = s.step(x)
    finally:
        s.close()
    with torch.no_grad():
        assert torch.equal(out, mod(x))
    assert all(p.grad is None for p in mod.parameters())


def test_bad_policy_names_it():
    s = ScheduleDAPPLE(PipelineStage(lin(), 0, 1), 2, torch.nn.MSELoss(), policy="zb-h9")
    with pytest.raises(dpl.InvalidArgument, match="zb-h9"):
        s.step(torch.zeros(4, 4, dtype=torch.float64), target=torch.zeros(4, 4, dtype=torch.float64))


def one_rank(sched_cls=Schedule1F1B, mod=None, **kw):
    return sched_cls(PipelineStage(mod or lin(), 0, 1), kw.pop("m", 2), torch.nn.MSELoss(), **kw)


def test_batch_smaller_than_microbatches():
    s = one_rank(m=4)
    with pytest.raises(dpl.InvalidArgument, match="a batch of 3 samples cannot make 4 micro-batches"):
        s.step(torch.zeros(3, 4, dtype=torch.float64), target=torch.zeros(3, 4, dtype=torch.float64))


def test_batch_change_after_first_step():
    s = one_rank()
    x = torch.zeros(4, 4, dtype=torch.float64)
    s.step(x, target=x)
    y = torch.zeros(6, 4, dtype=torch.float64)
    with pytest.raises(dpl.InvalidArgument, match="batch of 6 samples; the first step had 4"):
        s.step(y, target=y)


def test_missing_target_and_inputs():
    s = one_rank()
    x = torch.zeros(4, 4, dtype=torch.float64)
    with pytest.raises(dpl.InvalidArgument, match="needs target="):
        s.step(x)
    with pytest.raises(dpl.InvalidArgument, match="need the batch's inputs"):
        one_rank().step(target=x)


class _Mixed(torch.nn.Module):
    """A stage whose parameters are f32 and f64 (it casts between them)."""

    def __init__(self):
        super().__init__()
        self.a = lin(dtype=torch.float32)
        self.b = lin(dtype=torch.float64)

    def forward(self, x):
        return self.b(self.a(x.float()).double())


def test_mixed_parameter_dtypes_refused_where_replicas_reduce():
    def fn():
        s = ScheduleDAPPLE(PipelineStage(_Mixed(), 0, 1), 2, torch.nn.MSELoss(), replicas=[2])
        x = torch.zeros(4, 4, dtype=torch.float64)
        s.step(x, target=x)
    with pytest.raises(dpl.InvalidArgument, match="mixed dtypes"):
        dpl.run.threads(2, fn, timeout=60)


def test_mixed_parameter_dtypes_train_unreplicated():
    torch.manual_seed(0)
    mod = _Mixed()
    ref = _Mixed()
    ref.load_state_dict(mod.state_dict())
    x = torch.randn(4, 4, dtype=torch.float64)
    one_rank(mod=mod).step(x, target=x)
    torch.nn.MSELoss()(ref(x[:2]), x[:2]).backward()
    torch.nn.MSELoss()(ref(x[2:]), x[2:]).backward()
    for p, q in zip(mod.parameters(), ref.parameters()):
        assert p.grad.dtype == p.dtype
        assert torch.allclose(p.grad, q.grad / 2, rtol=1e-6, atol=0)


def test_world_size_mismatch_names_both():
    def fn():
        s = Schedule1F1B(PipelineStage(lin(), dpl.run.rank(), 3), 2, torch.nn.MSELoss())
        x = torch.zeros(4, 4, dtype=torch.float64)
        s.step(x, target=x)
    with pytest.raises(dpl.InvalidArgument, match="needs 3 ranks .* the world has 2"):
        dpl.run.threads(2, fn, timeout=60)


def test_a_dict_between_stages_is_refused():
    # tuples of tensors travel (test_torch_boundary.py); a dict does not
    class Two(torch.nn.Module):
        def forward(self, x):
            return {"x": x}

    def fn():
        r = dpl.run.rank()
        mod = Two() if r == 0 else lin()
        s = Schedule1F1B(PipelineStage(mod, r, 2), 2, torch.nn.MSELoss())
        x = torch.zeros(4, 4, dtype=torch.float64)
        s.step(*((x,) if r == 0 else ()), target=x if r == 1 else None)
    with pytest.raises(dpl.InvalidArgument, match="stage 0 returned dict as output 0; dpl.torch carries tensors"):
        dpl.run.threads(2, fn, timeout=60)


def test_stage_exception_is_raised_on_its_rank_and_peer_error_elsewhere():
    seen = {}

    def fn():
        r = dpl.run.rank()
        mod = lin()
        if r == 1:
            mod.register_forward_hook(lambda *a: (_ for _ in ()).throw(ValueError("bad stage 1")))
        s = Schedule1F1B(PipelineStage(mod, r, 3), 3, torch.nn.MSELoss(), timeout=20)
        x = torch.zeros(6, 4, dtype=torch.float64)
        try:
            s.step(*((x,) if r == 0 else ()), target=x if r == 2 else None)
        except BaseException as e:  # noqa: BLE001
            seen[r] = e
            raise
    with pytest.raises(ValueError, match="bad stage 1"):
        dpl.run.threads(3, fn, timeout=60)
    assert isinstance(seen[1], ValueError)
    for r in (0, 2):
        assert isinstance(seen[r], dpl.PeerError), repr(seen[r])
        assert seen[r].rank == 1, str(seen[r])
        assert "rank 1" in str(seen[r])


def test_failed_schedule_stays_failed():
    s = one_rank(m=4)
    x = torch.zeros(3, 4, dtype=torch.float64)
    with pytest.raises(dpl.InvalidArgument):
        s.step(x, target=x)
    with pytest.raises(dpl.Error, match="an earlier step failed"):
        s.step(x, target=x)


def test_stage_of():
    assert [stage_of(r, [3, 1]) for r in range(4)] == [(0, 0), (0, 1), (0, 2), (1, 0)]
    with pytest.raises(dpl.InvalidArgument, match="rank 4 is outside a world of 4 ranks"):
        stage_of(4, [3, 1])


def test_zbv_needs_two_stages_per_rank():
    from dpl.torch import ScheduleZBVZeroBubble
    s = ScheduleZBVZeroBubble(PipelineStage(lin(), 0, 1), 2, torch.nn.MSELoss())
    x = torch.zeros(4, 4, dtype=torch.float64)
    with pytest.raises(dpl.InvalidArgument, match="runs exactly two stages per rank"):
        s.step(x, target=x)


def test_one_stage_policy_refuses_two_stages():
    stages = [PipelineStage(lin(), 0, 2), PipelineStage(lin(), 1, 2)]
    s = ScheduleDAPPLE(stages, 2, torch.nn.MSELoss(), policy="1f1b")
    x = torch.zeros(4, 4, dtype=torch.float64)
    with pytest.raises(dpl.InvalidArgument, match="policy 1f1b runs one stage per rank"):
        s.step(x, target=x)
