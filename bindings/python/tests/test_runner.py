"""dpl.Runner: Python stage callbacks on dpl's buffers seen as numpy
arrays without copying, over threads; a scalar pipeline whose result is
known in closed form, and errors raised in callbacks."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import dpl
import dpl.run
import dpl.world
from dpl.runner import Runner, position, split, world_size


class Scale:
    """Stage s multiplies each sample by w[s] (one f64 weight per stage);
    the last stage's loss is sum(y) / batch."""

    def __init__(self, S, weights):
        self.S = S
        self.w = {s: np.array([weights[s]], dtype=np.float64) for s in range(S)}
        self.g = {s: np.zeros(1, dtype=np.float64) for s in range(S)}
        self.x = {}
        self.seen_views = set()
        self.steps = []

    def forward(self, a):
        n = a.end - a.begin
        x = np.arange(a.begin, a.end, dtype=np.float64) if a.stage == 0 else a.array("input", "float64")
        assert x.shape == (n,)
        self.x[(a.stage, a.microbatch)] = x.copy()
        if a.stage < self.S - 1:
            out = a.array("output", "float64")
            out[:] = x * self.w[a.stage][0]
            self.seen_views.add(out.__array_interface__["data"][0] == a.output)

    def backward(self, a):
        x = self.x.pop((a.stage, a.microbatch))
        if a.stage == self.S - 1:
            gy = np.full(x.shape, 1.0 / a.batch)
        else:
            gy = a.array("grad_output", "float64")
        self.g[a.stage][0] += float(np.dot(gy, x))
        if a.stage > 0:
            a.array("grad_input", "float64")[:] = gy * self.w[a.stage][0]

    def grads(self, stage):
        g = self.g[stage]
        return [(g.ctypes.data, 1, "float64")]

    def step(self, stage, iteration):
        self.steps.append((stage, iteration))


class ScaleSplit(Scale):
    """The same stages with backward split into I (input gradient) and W."""

    def _gy(self, a, n):
        return np.full(n, 1.0 / a.batch) if a.stage == self.S - 1 else a.array("grad_output", "float64")

    def backward_input(self, a):
        x = self.x[(a.stage, a.microbatch)]
        if a.stage > 0:
            a.array("grad_input", "float64")[:] = self._gy(a, x.shape) * self.w[a.stage][0]

    def backward_weight(self, a):
        x = self.x.pop((a.stage, a.microbatch))
        assert not a.grad_input   # W writes no input gradient (NULL)
        self.g[a.stage][0] += float(np.dot(self._gy(a, x.shape), x))


def rank_fn(S, M, batch, policy, weights):
    w = dpl.world.current()
    sched = dpl.schedule(policy, S, M).lower()
    cb = (ScaleSplit if policy == "zb-h1" else Scale)(S, weights)
    with dpl.world.Transport.open(w) as t:
        r = Runner(sched, cb, batch=batch, activation_bytes=[8] * S, rank=w.rank, transport=t)
        r.step()
        stats = r.stats()
        r.close()
    return cb, stats


@pytest.mark.parametrize("policy", ["gpipe", "1f1b", "zb-h1"])
def test_scalar_pipeline_gradients_in_closed_form(policy):
    S, M, batch = 3, 4, 10
    wts = [2.0, -3.0, 0.5]
    results = dpl.run.threads(S, rank_fn, S, M, batch, policy, wts, timeout=60)
    # loss = sum_i w0 w1 w2 x_i / batch; dL/dw_s = prod_{t != s} w_t * sum(x) / batch
    sx = sum(range(batch)) / batch
    prod = wts[0] * wts[1] * wts[2]
    for s, (cb, stats) in enumerate(results):
        assert cb.g[s][0] == pytest.approx(prod / wts[s] * sx, rel=1e-12)
        assert cb.steps == [(s, 0)]
        assert stats["iterations"] == 1
        assert stats["count"]["F"] == M
        if s < S - 1:
            assert cb.seen_views == {True}   # the array is dpl's buffer, not a copy


class ForwardOnly(Scale):
    """Scale whose last stage records each sample's output, and which
    fails on any backward-side callback."""

    def __init__(self, S, weights):
        super().__init__(S, weights)
        self.y = {}

    def forward(self, a):
        super().forward(a)
        if a.stage == self.S - 1:
            x = self.x.pop((a.stage, a.microbatch))
            for i, v in zip(range(a.begin, a.end), x * self.w[a.stage][0]):
                self.y[i] = float(v)
        else:
            self.x.pop((a.stage, a.microbatch))

    def backward(self, a):
        raise AssertionError("backward in a forward-only pass")

    def step(self, stage, iteration):
        raise AssertionError("step in a forward-only pass")


def forward_rank(S, M, batch, weights):
    w = dpl.world.current()
    sched = dpl.schedule("1f1b", S, M).lower()
    cb = ForwardOnly(S, weights)
    with dpl.world.Transport.open(w) as t:
        r = Runner(sched, cb, batch=batch, activation_bytes=[8] * S, rank=w.rank, transport=t)
        r.forward()
        r.forward()
        stats = r.stats()
        r.close()
    return cb, stats


def test_forward_only_passes_run_the_forwards_alone():
    S, M, batch = 3, 6, 10
    wts = [2.0, -3.0, 0.5]
    results = dpl.run.threads(S, forward_rank, S, M, batch, wts, timeout=60)
    cb, _ = results[-1]
    assert cb.y == {i: pytest.approx(i * wts[0] * wts[1] * wts[2], rel=1e-15)
                    for i in range(batch)}
    for s, (cb, stats) in enumerate(results):
        assert stats["iterations"] == 0
        assert stats["count"]["F"] == 2 * M
        assert stats["count"]["B"] == 0 and stats["count"]["RECV_B"] == 0
        assert stats["count"]["SEND_F"] == (2 * M if s < S - 1 else 0)


def test_callback_exception_reaches_the_caller_and_peers():
    class Bad(Scale):
        def forward(self, a):
            if a.stage == 1 and a.microbatch == 2:
                raise KeyError("stage 1 broke")
            super().forward(a)

    def fn():
        w = dpl.world.current()
        sched = dpl.schedule("1f1b", 3, 4).lower()
        with dpl.world.Transport.open(w) as t:
            r = Runner(sched, Bad(3, [1.0, 1.0, 1.0]), batch=8, activation_bytes=[8] * 3,
                       rank=w.rank, transport=t, timeout=20)
            try:
                r.step()
            except BaseException as e:  # noqa: BLE001
                return e
            finally:
                r.close()
    got = dpl.run.threads(3, fn, timeout=60)
    assert isinstance(got[1], KeyError) and "stage 1 broke" in str(got[1])
    assert isinstance(got[1].__cause__, dpl.CallbackError)
    for r in (0, 2):
        assert isinstance(got[r], dpl.PeerError) and got[r].rank == 1, repr(got[r])


def test_bad_arguments_name_the_value():
    sched = dpl.schedule("1f1b", 2, 2).lower()
    cb = Scale(2, [1.0, 1.0])
    with pytest.raises(dpl.InvalidArgument, match=r"batch must be an int >= 1 \(got 0\)"):
        Runner(sched, cb, batch=0)
    with pytest.raises(dpl.InvalidArgument, match="activation_bytes has 3 values, the schedule has 2"):
        Runner(sched, cb, batch=4, activation_bytes=[1, 2, 3])
    with pytest.raises(dpl.InvalidArgument, match="replicas has 1 values"):
        Runner(sched, cb, batch=4, replicas=[1])
    unlowered = dpl.schedule("1f1b", 2, 2)
    with pytest.raises(dpl.InvalidArgument, match="lower"):
        Runner(unlowered, cb, batch=4, transport=None)


def test_layout_helpers():
    sched = dpl.schedule("1f1b", 2, 4).lower()
    assert world_size(sched, [3, 1]) == 4
    assert [position(sched, [3, 1], r) for r in range(4)] == [(0, 0), (0, 1), (0, 2), (1, 0)]
    assert [split(10, 4, i) for i in range(4)] == [(0, 3), (3, 6), (6, 8), (8, 10)]
    with pytest.raises(dpl.InvalidArgument):
        split(10, 0, 0)


def test_struct_sizes_match_c():
    from dpl import _runner_capi as c
    # sizes on LP64: stage_args 6*u32/u64 fields + 8 pointer/size pairs
    assert ctypes.sizeof(c.StageArgs) == 4 * 4 + 4 * 8 + 8 * 8
    assert ctypes.sizeof(c.Buffer) == 24
    # RunnerStats: 2 totals, count[] and ns[] of 16 kinds each, 7 totals
    assert ctypes.sizeof(c.RunnerStats) == 8 * (2 + 2 * 16 + 7)
    assert ctypes.sizeof(c.StageStats) == 32
    assert ctypes.sizeof(c.Event) == 12 + 4 + 16
