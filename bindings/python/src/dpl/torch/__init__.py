"""dpl.torch: ``torch.distributed.pipelining``'s API on dpl.

Change ``from torch.distributed.pipelining import PipelineStage,
Schedule1F1B`` to ``from dpl.torch import PipelineStage, Schedule1F1B`` and
the script runs on dpl's runner.
"""

from .schedules import (Schedule1F1B, ScheduleDAPPLE, ScheduleGPipe,  # noqa: F401
                        ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble,
                        ScheduleDualPipeV, ScheduleLoopedBFS, ScheduleZBVZeroBubble,
                        stage_of)
from .stage import PipelineStage  # noqa: F401
from .plan import from_plan  # noqa: F401
from .profile import profile  # noqa: F401
