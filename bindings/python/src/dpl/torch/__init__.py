"""dpl.torch: ``torch.distributed.pipelining``'s API on dpl.

Change ``from torch.distributed.pipelining import PipelineStage,
Schedule1F1B`` to ``from dpl.torch import PipelineStage, Schedule1F1B`` and
the script runs on dpl's runner. Scripts that trace and split their model
with ``pipeline(...)`` and ``pipe.build_stage(...)`` change the same line.
The submodules keep PyTorch's names: ``dpl.torch.schedules``
(``get_schedule_class``, ``PipelineScheduleSingle``/``Multi``),
``dpl.torch.stage`` and ``dpl.torch.microbatch``.
"""

from .schedules import (PipelineScheduleMulti, PipelineScheduleSingle,  # noqa: F401
                        Schedule1F1B, ScheduleDAPPLE, ScheduleGPipe,
                        ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble,
                        ScheduleDualPipeV, ScheduleLoopedBFS, ScheduleZBVZeroBubble,
                        get_schedule_class, stage_of)
from .stage import PipelineStage, PipelineStageInfo  # noqa: F401
from .liveness import (PipelineActivationLiveness,  # noqa: F401
                       analyze_pipeline_activation_liveness)
from .plan import from_plan  # noqa: F401
from .profile import profile  # noqa: F401

# the tracing frontend needs torch.distributed.pipelining (150 MiB and
# seconds to import): loaded on first use
_PIPE = ("Pipe", "SplitPoint", "build_stage", "pipe_split", "pipeline")


def __getattr__(name: str):
    if name in _PIPE:
        from . import pipe
        return getattr(pipe, name)
    raise AttributeError(f"module 'dpl.torch' has no attribute {name!r}")
