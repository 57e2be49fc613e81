"""dpl's lowered schedules run in PyTorch's own runtime as they are.

For each PyTorch schedule class, dpl builds the policy of the same kind
(gpipe, 1f1b, interleaved, looped-bfs, interleaved-zb, zbv, dualpipev) at
the parity test's shape, lowers it with its own lowering and writes it with
``Schedule.to_csv(comms="pytorch")`` (``dpl_schedule_write_csv_comms``).
The parity test's training script then runs every file through
``torch.distributed.pipelining``'s ``_PipelineScheduleRuntime`` with
``_load_csv(path, format="compute_comms")`` -- PyTorch's runtime, PyTorch's
stages, no dpl in the rank processes -- and must train to the parameters
and losses of the unsplit model (relative 1e-5), as PyTorch's own classes
do in test_torch_parity.py. The same script with dpl.torch's import line
runs the same files through dpl.torch's ``_PipelineScheduleRuntime`` and
must train to the same parameters.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.pipelining.schedules")

from dpl.schedule import schedule  # noqa: E402
from test_torch_parity import (DPL_IMPORT, NAMES, RANKS, TOL, TORCH_IMPORT,  # noqa: E402
                               TWO_PER_RANK,
                               _launch, _model_namespace, _reference, _worst)

POLICY = {"ScheduleGPipe": "gpipe", "Schedule1F1B": "1f1b",
          "ScheduleInterleaved1F1B": "interleaved", "ScheduleLoopedBFS": "looped-bfs",
          "ScheduleInterleavedZeroBubble": "interleaved-zb",
          "ScheduleZBVZeroBubble": "zbv", "ScheduleDualPipeV": "dualpipev"}
CHUNKED = ("interleaved", "looped-bfs", "interleaved-zb")


def _write_files(tmp) -> dict:
    """dpl's file for each class, and its text."""
    m = _model_namespace()["MICROBATCHES"]
    texts = {}
    for name in NAMES:
        pol = POLICY[name]
        kw = {"chunks": 2} if pol in CHUNKED else {}
        with schedule(pol, stages=RANKS, microbatches=m, **kw) as s:
            text = s.to_csv(comms="pytorch")
        (tmp / f"{name}.csv").write_text(text)
        texts[name] = text
    return texts


@pytest.fixture(scope="module")
def comms_run(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("comms_csv")
    texts = _write_files(tmp)
    env = {"DPL_COMMS_CSV_DIR": str(tmp)}
    return {"texts": texts,
            "runs": _launch(TORCH_IMPORT, NAMES, tmp, "torch-comms", env),
            "dpl": _launch(DPL_IMPORT, NAMES, tmp, "dpl-comms", env)}


def test_files_hold_pytorchs_comms_kinds(comms_run):
    for name, text in comms_run["texts"].items():
        assert "STEP" not in text, name
        assert text.count("REDUCE_GRAD") == 2 * text.count("WAIT_REDUCE_GRAD"), name
        assert text.count("SEND_F") == 2 * text.count("WAIT_SEND_F"), name
        assert text.count("SEND_B") == 2 * text.count("WAIT_SEND_B"), name
    assert ")OVERLAP_F_B" in comms_run["texts"]["ScheduleDualPipeV"]


@pytest.mark.parametrize("name", NAMES)
def test_pytorch_runtime_trains_dpls_file(name, comms_run):
    got = comms_run["runs"][name]
    assert "error" not in got, got.get("error")
    n_stages = RANKS * (2 if name in TWO_PER_RANK else 1)
    ref = _reference(n_stages)
    worst = _worst(got, ref)
    assert worst <= TOL, f"PyTorch running dpl's {POLICY[name]} file vs one process: {worst:.3g}"
    flat = [v for it in got["losses"] for v in it]
    assert flat == pytest.approx([v for it in ref["losses"] for v in it], rel=TOL)


@pytest.mark.parametrize("name", NAMES)
def test_dpl_runtime_trains_the_same_file_as_pytorchs(name, comms_run):
    """The script's dpl.torch side: ``_PipelineScheduleRuntime`` and
    ``_load_csv(path, format="compute_comms")`` from dpl.torch.schedules."""
    got, theirs = comms_run["dpl"][name], comms_run["runs"][name]
    assert "error" not in got, got.get("error")
    assert "error" not in theirs, theirs.get("error")
    n_stages = RANKS * (2 if name in TWO_PER_RANK else 1)
    worst = max(_worst(got, theirs), _worst(got, _reference(n_stages)))
    assert worst <= TOL, f"dpl.torch running dpl's {POLICY[name]} file: {worst:.3g}"
    flat = [v for it in got["losses"] for v in it]
    assert flat == pytest.approx([v for it in theirs["losses"] for v in it], rel=TOL)
