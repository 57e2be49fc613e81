"""dpl.torch.profile: a PyTorch model measured layer by layer into a profile
that the planner and the ``dpl plan`` command read."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dpl.plan import Cluster, Profile, plan as make_plan  # noqa: E402
from dpl.torch.profile import profile  # noqa: E402


def cli() -> str:
    exe = os.environ.get("DPL_CLI")
    if exe and Path(exe).is_file():
        return exe
    found = shutil.which("dpl")
    if found is None:
        pytest.skip("the dpl command was not found (set DPL_CLI to a built "
                    "bindings/cli/dpl); this test did not run")
    return found


def small_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 16))


def test_profile_sizes_times_and_file(tmp_path):
    model = small_model()
    x = torch.randn(64, 512)
    before = [p.grad for p in model.parameters()]
    out = tmp_path / "mlp-pbs-64.txt"
    prof = profile(model, x, iterations=5, warmup=1, path=out)
    assert isinstance(prof, Profile) and prof.batch == 64 and len(prof) == 3
    lin, relu, head = prof.layers
    assert [L.name for L in prof.layers] == ["Linear_0", "ReLU_1", "Linear_2"]
    # exact tensor sizes: outputs at batch 64, weights + biases, float32
    assert lin.activation_bytes == 64 * 512 * 4
    assert relu.activation_bytes == 64 * 512 * 4
    assert head.activation_bytes == 64 * 16 * 4
    assert lin.parameter_bytes == (512 * 512 + 512) * 4
    assert relu.parameter_bytes == 0
    assert head.parameter_bytes == (512 * 16 + 16) * 4
    # 33.5 MFLOP against 32 K element-wise operations
    assert lin.forward_ms > relu.forward_ms
    assert lin.backward_ms > relu.backward_ms
    assert all(L.forward_ms > 0 for L in prof.layers)
    assert prof.edges == [(0, 1), (1, 2)]
    # the parameters' .grad are not touched
    assert [p.grad for p in model.parameters()] == before
    # the file loads back, pbs from its name, and plans
    back = Profile.load(out)
    assert back.layers == prof.layers and back.batch == 64
    assert not [f for f in tmp_path.iterdir() if f.name != out.name]
    p = make_plan(back, Cluster.host(2), gbs=128)
    assert p.stages[-1][1] == 3
    r = subprocess.run([cli(), "plan", "--profile", str(out), "--pbs", "64", "--gbs", "128",
                        "--cluster", "paper-a"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "Linear_0" in r.stdout


def test_profile_list_of_modules_and_tuple_outputs():
    class Pair(torch.nn.Module):
        def forward(self, x):
            return x * 2, x + 1

    class Sum(torch.nn.Module):
        def forward(self, a, b):
            return a + b

    prof = profile([torch.nn.Linear(8, 8), Pair(), Sum()], torch.randn(4, 8),
                   iterations=2, warmup=0, name="pairs")
    assert prof.name == "pairs" and prof.batch == 4
    assert [L.name for L in prof.layers] == ["Linear_0", "Pair_1", "Sum_2"]
    assert prof.layers[1].activation_bytes == 2 * 4 * 8 * 4
    assert prof.layers[2].activation_bytes == 4 * 8 * 4


def test_profile_shared_parameters_count_once():
    lin = torch.nn.Linear(32, 32)

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = lin, lin

        def forward(self, x):
            return self.b(self.a(x))

    prof = profile([Twice()], torch.randn(2, 32), iterations=1, warmup=0)
    assert prof.layers[0].parameter_bytes == (32 * 32 + 32) * 4


def test_profile_bad_inputs():
    import dpl
    with pytest.raises(dpl.InvalidArgument, match="no layers"):
        profile(torch.nn.Sequential(), torch.randn(2, 2))
    with pytest.raises(dpl.InvalidArgument, match="batch dimension"):
        profile([torch.nn.ReLU()], torch.tensor(1.0))
    with pytest.raises(dpl.InvalidArgument, match="iterations: 0"):
        profile([torch.nn.ReLU()], torch.randn(2, 2), iterations=0)
    with pytest.raises(dpl.InvalidArgument, match="layer 1 is int"):
        profile([torch.nn.ReLU(), 3], torch.randn(2, 2))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_profile_on_cuda():
    model = small_model().cuda()
    prof = profile(model, torch.randn(64, 512, device="cuda"), iterations=5, warmup=2)
    assert prof.layers[0].activation_bytes == 64 * 512 * 4
    assert prof.layers[0].forward_ms > 0 and prof.layers[0].backward_ms > 0
