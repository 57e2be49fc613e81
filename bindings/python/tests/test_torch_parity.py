"""dpl.torch is a drop-in for torch.distributed.pipelining: one training
script, run once with PyTorch's import line and once with dpl's, trains to
the same parameters, and its forward-only pass (``eval``) after training
gives the same outputs and losses.

The script (SCRIPT below) initialises torch.distributed (gloo on 127.0.0.1,
a free port; dpl.torch then takes its store as the rendezvous), cuts a
small f32 MLP into stages, trains ITERS steps of SGD with momentum through
the schedule classes named on its command line, and saves each of its stages'
parameters and the last stage's per-micro-batch losses. The two runs differ
only in the line marked IMPORT. Both must agree with each other, and with
the same training done in this process on the unsplit model, to a relative
difference of 1e-5: for each parameter tensor max|a - b| / max|b|.

Ranks are processes started here with RANK / WORLD_SIZE / MASTER_ADDR /
MASTER_PORT, as torchrun would; each launch is bounded by LAUNCH_TIMEOUT
and its processes are killed when it runs over. Each side is one launch
that trains the three schedules in turn.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from loopback import free_port

import dpl

torch = pytest.importorskip("torch")

# The rank processes import dpl from where this process found it.
_DPL_PATH = os.path.dirname(os.path.dirname(os.path.abspath(dpl.__file__)))

_CLASSES = ("PipelineStage, ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B, "
            "ScheduleLoopedBFS, ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble, "
            "ScheduleDualPipeV, pipeline, SplitPoint")
_BY_NAME = "get_schedule_class, PipelineScheduleMulti, _PipelineScheduleRuntime"
TORCH_IMPORT = (f"from torch.distributed.pipelining import {_CLASSES}\n"
                f"from torch.distributed.pipelining.schedules import {_BY_NAME}")
_SPECS = "TensorChunkSpec, _Replicate"
TORCH_IMPORT += f"\nfrom torch.distributed.pipelining.microbatch import {_SPECS}"
DPL_IMPORT = (f"from dpl.torch import {_CLASSES}\nfrom dpl.torch.schedules import {_BY_NAME}\n"
              f"from dpl.torch.microbatch import {_SPECS}")
# classes that hold two stages per rank; ZBV and DualPipeV in a V (rank r:
# r and 2P-1-r)
TWO_PER_RANK = ("ScheduleInterleaved1F1B", "ScheduleLoopedBFS",
                "ScheduleInterleavedZeroBubble", "ScheduleZBVZeroBubble", "ScheduleDualPipeV")
# classes whose eval() is compared with PyTorch's: with two stages per rank
# PyTorch 2.15's eval failed in this script ("can't steal_bwd_input if this
# stage doesn't have backward"), which ends the launch; dpl.torch's eval of
# those classes is checked against one process in test_torch_eval.py
EVAL_NAMES = ("ScheduleGPipe", "Schedule1F1B")
RANKS = 2
LAUNCH_TIMEOUT = 60.0
TOL = 1e-5

MODEL = '''
import torch

WIDTHS = (6, 16, 16, 16, 3)
BATCH, MICROBATCHES, ITERS, LR, MOMENTUM = 8, 4, 3, 0.1, 0.9


class TupleFirst(torch.nn.Module):
    """x -> (h, flag int64, side): a tuple of three tensors to the next stage."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(WIDTHS[0], WIDTHS[1])

    def forward(self, x):
        h = torch.tanh(self.lin(x))
        return h, (x[:, 0] > 0).long(), h[:, :4] * 0.5


class TupleMid(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.a = torch.nn.Linear(WIDTHS[1], WIDTHS[1])
        self.b = torch.nn.Linear(k, WIDTHS[1])

    def forward(self, h, flag, side):
        h2 = torch.tanh(self.a(h) + self.b(side)) * (1 + flag.unsqueeze(1))
        return h2, flag, h2 * 0.5


class TupleLast(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.a = torch.nn.Linear(WIDTHS[1], WIDTHS[-1])
        self.b = torch.nn.Linear(k, WIDTHS[-1])

    def forward(self, h, flag, side):
        return self.a(h) + self.b(side) * flag.unsqueeze(1)


class NestedFirst(torch.nn.Module):
    """(x, (cols, {"scale": s, "k": 2.0})) -> h: a container input, whose
    cols are cut along dimension 1 (extra_of)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(WIDTHS[0], WIDTHS[1])

    def forward(self, x, extra):
        cols, d = extra
        return torch.tanh(self.lin(x) * d["scale"] * d["k"] + cols.t())


class PairLast(torch.nn.Module):
    """h -> (y, norm): a tuple output, merged element by element (PyTorch
    2.15's runtime refuses a dict output, which dpl.torch merges too)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(WIDTHS[1], WIDTHS[-1])

    def forward(self, h):
        return self.lin(h), h.pow(2).sum(1)


class MaskedPart(torch.nn.Module):
    """A stage that takes the step's keyword mask: PyTorch hands a step's
    keyword inputs to every stage of the rank, the first or not."""

    def __init__(self, a, b, last):
        super().__init__()
        self.lin, self.last = torch.nn.Linear(a, b), last

    def forward(self, h, mask):
        y = self.lin(h)
        return y * mask[:, :y.shape[1]] if self.last else torch.tanh(y) * mask


def extra_of(x):
    """The container the nested variant's first stage takes with x."""
    cols = (x[:, :1] * 0.1).expand(-1, WIDTHS[1]).t().contiguous()
    return cols, {"scale": (x[:, 1:2] > 0).float() + 0.5, "k": 2.0}


def nested_loss(out, y):
    return torch.nn.functional.mse_loss(out[0], y) + 0.01 * out[1].mean()


def chain(parts, x, variant=""):
    """The parts one after the other; a tuple is the next part's arguments."""
    if variant == "nested":
        x = parts[0](x, extra=extra_of(x))
        parts = parts[1:]
    if variant == "masked":
        m = mask_of(x)
        for p in parts:
            x = p(x, mask=m)
        return x
    for p in parts:
        x = p(*x) if isinstance(x, tuple) else p(x)
    return x


def build_parts(n_stages, variant=""):
    """The MLP (Linear+Tanh, 4 Linear layers) cut into n_stages parts; or
    stages that hand the next a tuple of tensors ("tuples"); or a first
    stage taking a container and a last returning a tuple ("nested")."""
    torch.manual_seed(7)
    if variant == "masked":
        return [MaskedPart(WIDTHS[0] if s == 0 else WIDTHS[1],
                           WIDTHS[-1] if s == n_stages - 1 else WIDTHS[1], s == n_stages - 1)
                for s in range(n_stages)]
    if variant == "nested":
        return [NestedFirst()] + [torch.nn.Sequential(torch.nn.Linear(WIDTHS[1], WIDTHS[1]),
                                                      torch.nn.Tanh())
                                  for _ in range(1, n_stages - 1)] + [PairLast()]
    if variant == "tuples":
        return [TupleFirst()] + [TupleMid(4 if s == 1 else WIDTHS[1])
                                 for s in range(1, n_stages - 1)] + \
            [TupleLast(4 if n_stages == 2 else WIDTHS[1])]
    layers = []
    for i, (a, b) in enumerate(zip(WIDTHS, WIDTHS[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(WIDTHS) - 2:
            layers.append(torch.nn.Tanh())
    per = len(WIDTHS) - 1
    cuts = [0]
    for k in range(1, n_stages + 1):  # whole Linear(+Tanh) blocks per part
        end = round(k * per / n_stages)
        cuts.append(min(2 * end, len(layers)))
    return [torch.nn.Sequential(*layers[cuts[k]:cuts[k + 1]]) for k in range(n_stages)]


def batches():
    g = torch.Generator().manual_seed(11)
    return [(torch.randn(BATCH, WIDTHS[0], generator=g),
             torch.randn(BATCH, WIDTHS[-1], generator=g)) for _ in range(ITERS)]


class TracedNet(torch.nn.Module):
    """For pipeline(): a skip connection from the first layer to the head,
    over every cut, and a keyword input (mask). The mask is used on the
    first stage only: PyTorch 2.15's runtime refuses a model input used
    on a later stage ("expected non-root _RecvInfo but got root arg"),
    which dpl.torch runs (test_torch_pipe.py)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Linear(WIDTHS[0], WIDTHS[1])
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(WIDTHS[1], WIDTHS[1])
                                           for _ in range(4)])
        self.head = torch.nn.Linear(WIDTHS[1], WIDTHS[-1])

    def forward(self, x, mask):
        h = skip = self.emb(x) * mask
        for b in self.blocks:
            h = torch.tanh(b(h))
        return self.head(h + skip)


def traced_model():
    torch.manual_seed(7)
    return TracedNet()


def split_spec(n_stages):
    """Cuts before blocks so that n_stages (2 or 4) parts remain."""
    at = {2: ["blocks.2"], 4: ["blocks.1", "blocks.2", "blocks.3"]}[n_stages]
    return {name: SplitPoint.BEGINNING for name in at}


def mask_of(x):
    return (x[:, :1] > -0.5).float().expand(-1, WIDTHS[1]).contiguous()


def eval_batch():
    g = torch.Generator().manual_seed(13)
    return (torch.randn(BATCH, WIDTHS[0], generator=g),
            torch.randn(BATCH, WIDTHS[-1], generator=g))
'''

SCRIPT = '''
import contextlib
import datetime
import os
import sys
import traceback

import torch
import torch.distributed as dist
{IMPORT}  # IMPORT: the only lines that differ
{MODEL}

def train(name, rank, world):
    name, _, variant = name.partition(":")
    # the class by its name, and its stages per rank by its base, as
    # trainers that take the schedule from their configuration do
    cls = get_schedule_class(name.removeprefix("Schedule"))
    per_rank = 2 if issubclass(cls, PipelineScheduleMulti) else 1
    n_stages = world * per_rank
    mine = [rank + k * world for k in range(per_rank)]
    if name in ("ScheduleZBVZeroBubble", "ScheduleDualPipeV"):
        mine = [rank, 2 * world - 1 - rank]
    if variant == "traced":   # PyTorch's tracer cuts the model
        x0 = batches()[0][0][:BATCH // MICROBATCHES]
        pipe = pipeline(traced_model(), (x0,), {{"mask": mask_of(x0)}},
                        split_spec=split_spec(n_stages))
        stages = [pipe.build_stage(s, torch.device("cpu")) for s in mine]
        parts = {{s: st.submod for s, st in zip(mine, stages)}}
    else:
        parts = build_parts(n_stages, variant)
        stages = [PipelineStage(parts[s], s, n_stages, torch.device("cpu")) for s in mine]
    seen = {{s: [] for s in mine}}
    if variant == "context":   # each forward's PipelineStageInfo, in order

        def recorder(s):
            @contextlib.contextmanager
            def ctx(info):
                seen[s].append((info.stage_index, info.microbatch_index,
                                info.is_metadata_inference))
                yield
            return ctx

        for s, st in zip(mine, stages):
            st.register_forward_context(recorder(s))
    csv_dir = os.environ.get("DPL_COMMS_CSV_DIR")  # test_torch_comms_csv.py
    if csv_dir:
        sched = _PipelineScheduleRuntime(stages, MICROBATCHES,
                                         loss_fn=torch.nn.MSELoss())
        sched._load_csv(os.path.join(csv_dir, name + ".csv"), format="compute_comms")
    elif variant == "nested":   # the container (a keyword input: PyTorch 2.15 takes
        # tensors only as positional ones) with its cols cut along dimension 1
        spec = {{"extra": (TensorChunkSpec(1), {{"scale": TensorChunkSpec(0),
                                                "k": _Replicate()}})}}
        sched = cls(stages if per_rank > 1 else stages[0], MICROBATCHES,
                    loss_fn=nested_loss, args_chunk_spec=(TensorChunkSpec(0),),
                    kwargs_chunk_spec=spec)
    elif variant == "pytorchargs":   # PyTorch's own arguments; gradients scaled by hand
        if per_rank > 1:
            sched = cls(stages, MICROBATCHES, loss_fn=torch.nn.MSELoss(), scale_grads=False,
                        backward_requires_autograd=True, defer_pp_recv=True,
                        max_active_stages=2, unshard_lookahead="auto",
                        max_outstanding_sends=4)
        else:   # by position: scale_grads is the seventh
            sched = cls(stages[0], MICROBATCHES, torch.nn.MSELoss(), None, None, None, False)
    else:
        sched = cls(stages if per_rank > 1 else stages[0], MICROBATCHES,
                    loss_fn=torch.nn.MSELoss())
    params = [p for s in mine for p in parts[s].parameters()]
    opt = torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)
    all_losses = []
    for x, y in batches():
        opt.zero_grad()
        args = (x,) if 0 in mine else ()
        kw = {{"extra": extra_of(x)}} if variant == "nested" and 0 in mine else {{}}
        losses = []
        if n_stages - 1 in mine:
            kw.update(target=y, losses=losses)
        if (variant == "traced" and 0 in mine) or variant == "masked":   # masked: every rank
            kw["mask"] = mask_of(x)
        sched.step(*args, **kw)
        if variant == "pytorchargs":
            for st in stages:
                st.scale_grads(MICROBATCHES)
        opt.step()
        all_losses.append([float(l) for l in losses])
    result = {{"params": {{s: [p.detach().clone() for p in parts[s].parameters()]
                          for s in mine}},
              "losses": all_losses, "contexts": seen}}
    if not csv_dir and not variant and name in {EVAL}:  # eval of the trained model
        xe, ye = eval_batch()
        ev_losses = []
        ekw = {{"target": ye, "losses": ev_losses}} if n_stages - 1 in mine else {{}}
        with torch.no_grad():
            out = sched.eval(*((xe,) if 0 in mine else ()), **ekw)
        result["eval"] = {{"out": None if out is None else out.detach().clone(),
                          "losses": [float(l) for l in ev_losses]}}
    return result


def main():
    names, out = sys.argv[1].split(","), sys.argv[2]
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=50))
    results = {{}}
    for name in names:  # in turn; the first failure ends the run
        try:
            results[name] = train(name, rank, world)
        except Exception:
            results[name] = {{"error": traceback.format_exc()}}
            break
        dist.barrier()
    torch.save(results, out)
    if all("error" not in r for r in results.values()):
        dist.destroy_process_group()


main()
'''


def _model_namespace() -> dict:
    ns: dict = {}
    exec(compile(MODEL, "parity_model", "exec"), ns)  # the script's own model code
    return ns


def _launch(import_line: str, names: list[str], tmp_path, tag: str,
            extra_env: dict | None = None) -> dict:
    """Run the script on RANKS processes for every schedule in `names`
    (with `extra_env` added to their environment); return {name:
    {"params": {stage: tensors}, "losses": ...} or {"error": text}}.
    Bounded by LAUNCH_TIMEOUT; stragglers are killed."""
    script = tmp_path / f"train_{tag}.py"
    script.write_text(SCRIPT.format(IMPORT=import_line, MODEL=MODEL,
                                    EVAL=repr(EVAL_NAMES)))
    port = str(free_port(2))  # torch's store, and dpl's MASTER_PORT + 1
    procs, outs, logs = [], [], []
    for r in range(RANKS):
        out = tmp_path / f"{tag}.{r}.pt"
        log = open(tmp_path / f"{tag}.{r}.log", "w+")
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(RANKS), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port, OMP_NUM_THREADS="1",
                   GLOO_SOCKET_IFNAME="lo",
                   PYTHONPATH=os.pathsep.join(
                       [_DPL_PATH] + ([os.environ["PYTHONPATH"]]
                                      if os.environ.get("PYTHONPATH") else [])),
                   **(extra_env or {}))
        procs.append(subprocess.Popen([sys.executable, str(script), ",".join(names),
                                       str(out)],
                                      env=env, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True))
        outs.append(out)
        logs.append(log)
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    try:
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.02)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
    text = []
    for r, log in enumerate(logs):
        log.seek(0)
        text.append(f"--- rank {r} (status {procs[r].returncode})\n{log.read()[-4000:]}")
        log.close()
    report = "\n".join(text)
    merged: dict = {n: {"params": {}, "losses": None} for n in names}
    for r, out in enumerate(outs):
        if procs[r].returncode != 0 or not out.exists():
            return {n: {"error": f"{tag}: rank {r} did not finish\n{report}"}
                    for n in names}
        for n, d in torch.load(out).items():
            if "error" in d:
                merged[n] = {"error": f"{tag}: rank {r}:\n{d['error']}\n{report}"}
            elif "error" not in merged[n]:
                merged[n]["params"].update(d["params"])
                merged[n].setdefault("contexts", {}).update(d["contexts"])
                ev = d.get("eval")
                if ev is not None and ev["out"] is not None:
                    merged[n]["eval"] = ev
                if d["losses"] and d["losses"][0]:
                    merged[n]["losses"] = d["losses"]
    for n in names:
        if "error" not in merged[n] and not merged[n]["params"]:
            merged[n] = {"error": f"{tag}: not run (an earlier schedule failed)\n{report}"}
    return merged


NAMES = ["ScheduleGPipe", "Schedule1F1B", "ScheduleInterleaved1F1B", "ScheduleLoopedBFS",
         "ScheduleInterleavedZeroBubble", "ScheduleZBVZeroBubble", "ScheduleDualPipeV"]
# the same script on stages that hand the next a tuple of tensors (an f32
# activation, an int64 flag, a second f32 view of the activation)
TUPLE_NAMES = ["ScheduleGPipe:tuples", "Schedule1F1B:tuples", "ScheduleInterleaved1F1B:tuples"]
# the same script on a model cut by PyTorch's tracer (pipeline() and
# build_stage()), with a skip connection over every cut and a keyword input;
# PyTorch 2.15's classes with several stages per rank refuse the skip
# connection ("only supports adjacent-stage communication"), which
# dpl.torch runs (test_torch_pipe.py)
TRACED_NAMES = ["ScheduleGPipe:traced", "Schedule1F1B:traced"]
# the same script with a forward context on every stage (PyTorch 2.15's
# register_forward_context) that records each forward's PipelineStageInfo
CONTEXT_NAMES = ["ScheduleGPipe:context", "Schedule1F1B:context",
                 "ScheduleInterleaved1F1B:context"]
# the same script with a first stage that takes a container (a tensor of it
# cut along dimension 1 by a nested kwargs_chunk_spec) and a last stage
# that returns a tuple. PyTorch 2.15's Interleaved1F1B hands the keyword
# input to the rank's later stage too, whose forward does not take it, in
# its set-up ("unexpected keyword argument 'extra'"), so it is left out
# here (test_torch_chunks.py checks containers on dpl.torch alone)
NESTED_NAMES = ["ScheduleGPipe:nested", "Schedule1F1B:nested"]
# the same script built with PyTorch's own constructor arguments: the
# multi-stage classes' runtime tuning (defer_pp_recv, max_active_stages,
# unshard_lookahead, max_outstanding_sends), scale_grads=False by position
# or name, and each stage's scale_grads(M) called after the step
# the same script with a keyword mask that every rank passes to step() and
# every stage takes (PyTorch hands a step's keyword inputs to every stage
# of the rank)
MASKED_NAMES = ["ScheduleGPipe:masked", "Schedule1F1B:masked", "ScheduleInterleaved1F1B:masked"]
ARGS_NAMES = ["ScheduleGPipe:pytorchargs", "Schedule1F1B:pytorchargs",
              "ScheduleInterleaved1F1B:pytorchargs", "ScheduleLoopedBFS:pytorchargs"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """Both sides, every schedule: one launch per side."""
    tmp = tmp_path_factory.mktemp("parity")
    names = NAMES + TUPLE_NAMES + TRACED_NAMES + CONTEXT_NAMES + NESTED_NAMES + ARGS_NAMES + \
        MASKED_NAMES
    return {"torch": _launch(TORCH_IMPORT, names, tmp, "torch"),
            "dpl": _launch(DPL_IMPORT, names, tmp, "dpl")}


def _stages_of(name: str) -> int:
    return RANKS * (2 if name.partition(":")[0] in TWO_PER_RANK else 1)


def _traced_names(ns: dict, n_stages: int) -> list[list[str]]:
    """Each stage's parameter names when PyTorch's tracer cuts the model."""
    from torch.distributed.pipelining import SplitPoint, pipeline
    ns["SplitPoint"] = SplitPoint
    x0 = ns["batches"]()[0][0][:ns["BATCH"] // ns["MICROBATCHES"]]
    pipe = pipeline(ns["traced_model"](), (x0,), {"mask": ns["mask_of"](x0)},
                    split_spec=ns["split_spec"](n_stages))
    return [[n for n, _ in pipe.get_stage_module(s).named_parameters()]
            for s in range(n_stages)]


def _reference(n_stages: int, variant: str = "") -> dict:
    """The same training on the unsplit model in this process."""
    ns = _model_namespace()
    if variant == "traced":
        model = ns["traced_model"]()
        named = dict(model.named_parameters())
        stage_params = [[named[n] for n in names] for names in _traced_names(ns, n_stages)]
        run = lambda xs: model(xs, ns["mask_of"](xs))  # noqa: E731
    else:
        parts = ns["build_parts"](n_stages, variant)
        model = torch.nn.ModuleList(parts)
        stage_params = [list(p.parameters()) for p in parts]
        run = lambda xs: ns["chain"](parts, xs, variant)  # noqa: E731
    opt = torch.optim.SGD(model.parameters(), lr=ns["LR"], momentum=ns["MOMENTUM"])
    M = ns["MICROBATCHES"]
    all_losses = []
    for x, y in ns["batches"]():
        opt.zero_grad()
        losses = []
        loss_fn = ns["nested_loss"] if variant == "nested" else torch.nn.functional.mse_loss
        for xs, ys in zip(x.tensor_split(M), y.tensor_split(M)):
            loss = loss_fn(run(xs), ys)
            loss.backward()
            losses.append(float(loss.detach()))
        for p in model.parameters():
            p.grad.div_(M)
        opt.step()
        all_losses.append(losses)
    return {"params": {s: [p.detach().clone() for p in stage_params[s]]
                       for s in range(n_stages)}, "losses": all_losses}


def _rel(a, b) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def _worst(got: dict, want: dict) -> float:
    assert sorted(got["params"]) == sorted(want["params"])
    worst = 0.0
    for s, ps in want["params"].items():
        assert len(got["params"][s]) == len(ps)
        for a, b in zip(got["params"][s], ps):
            assert a.shape == b.shape and a.dtype == b.dtype == torch.float32
            worst = max(worst, _rel(a, b))
    return worst


@pytest.mark.parametrize("name", NAMES + TUPLE_NAMES + TRACED_NAMES + CONTEXT_NAMES +
                         NESTED_NAMES + ARGS_NAMES + MASKED_NAMES)
def test_same_script_same_parameters(name, runs):
    n_stages = _stages_of(name)
    variant = name.partition(":")[2]
    ref = _reference(n_stages, variant)
    ns = _model_namespace()
    if variant == "traced":
        named = dict(ns["traced_model"]().named_parameters())
        init = [[named[n] for n in names] for names in _traced_names(ns, n_stages)]
    else:
        init = [list(p.parameters()) for p in ns["build_parts"](n_stages, variant)]
    # Training moved every stage's parameters (so equality below means something).
    for s in range(n_stages):
        assert any(_rel(p, q.detach()) > 1e-3 for p, q in zip(ref["params"][s], init[s]))
    pt, dp = runs["torch"][name], runs["dpl"][name]
    assert "error" not in pt, pt.get("error")
    assert "error" not in dp, dp.get("error")
    d_pt_dpl = _worst(dp, pt)
    d_pt_ref = _worst(pt, ref)
    d_dpl_ref = _worst(dp, ref)
    assert d_pt_dpl <= TOL, f"dpl vs PyTorch: {d_pt_dpl:.3g}"
    assert d_pt_ref <= TOL, f"PyTorch vs one process: {d_pt_ref:.3g}"
    assert d_dpl_ref <= TOL, f"dpl vs one process: {d_dpl_ref:.3g}"
    assert pt["losses"] is not None and dp["losses"] is not None
    M = _model_namespace()["MICROBATCHES"]
    assert all(len(l) == M for l in dp["losses"])
    flat = [v for it in dp["losses"] for v in it]
    assert flat == pytest.approx([v for it in pt["losses"] for v in it], rel=TOL)
    assert flat == pytest.approx([v for it in ref["losses"] for v in it], rel=TOL)


@pytest.mark.parametrize("name", CONTEXT_NAMES)
def test_same_script_same_forward_contexts(name, runs):
    """Each stage's forwards ran inside its context with the same stage and
    micro-batch indices, in the same order, on both sides. Set-up forwards
    that infer shapes (is_metadata_inference) are each runtime's own: at
    most one per stage, on micro-batch 0."""
    n_stages = _stages_of(name)
    ns = _model_namespace()
    M, iters = ns["MICROBATCHES"], ns["ITERS"]
    pt, dp = runs["torch"][name], runs["dpl"][name]
    assert "error" not in pt, pt.get("error")
    assert "error" not in dp, dp.get("error")
    for side in (pt, dp):
        assert sorted(side["contexts"]) == list(range(n_stages))
        for s, seen in side["contexts"].items():
            probes = [x for x in seen if x[2]]
            assert probes in ([], [(s, 0, True)])
            assert [x for x in seen if not x[2]] == [(s, j, False) for j in range(M)] * iters
    assert {s: [x for x in v if not x[2]] for s, v in dp["contexts"].items()} == \
        {s: [x for x in v if not x[2]] for s, v in pt["contexts"].items()}


@pytest.mark.parametrize("name", EVAL_NAMES)
def test_same_script_same_eval(name, runs):
    """schedule.eval() after training: the last stage's outputs and losses
    agree between the sides, and with the unsplit model in this process."""
    n_stages = RANKS * (2 if name in TWO_PER_RANK else 1)
    ns = _model_namespace()
    ref = _reference(n_stages)
    parts = ns["build_parts"](n_stages)
    with torch.no_grad():
        for s in range(n_stages):
            for p, q in zip(parts[s].parameters(), ref["params"][s]):
                p.copy_(q)
        xe, ye = ns["eval_batch"]()
        model = torch.nn.Sequential(*parts)
        want = model(xe)
        M = ns["MICROBATCHES"]
        want_losses = [float(torch.nn.functional.mse_loss(model(a), b))
                       for a, b in zip(xe.tensor_split(M), ye.tensor_split(M))]
    pt, dp = runs["torch"][name], runs["dpl"][name]
    assert "error" not in pt, pt.get("error")
    assert "error" not in dp, dp.get("error")
    assert "eval" in pt and "eval" in dp
    assert _rel(dp["eval"]["out"], pt["eval"]["out"]) <= TOL
    assert _rel(dp["eval"]["out"], want) <= TOL
    assert dp["eval"]["losses"] == pytest.approx(pt["eval"]["losses"], rel=TOL)
    assert dp["eval"]["losses"] == pytest.approx(want_losses, rel=TOL)
