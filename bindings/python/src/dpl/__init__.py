"""dpl: DAPPLE's pipeline scheduling kernel, from Python.

``import dpl`` needs no torch: schedules, simulation and planning work on
their own; ``dpl.torch`` is the drop-in for ``torch.distributed.pipelining``.
"""

from .errors import (CallbackError, Error, InvalidArgument, PeerError,  # noqa: F401
                     TimeoutError)
from .schedule import (Action, Schedule, ScheduleError, ScheduleIssue,  # noqa: F401
                       StageCost, schedule)
from .sim import SimEvent, SimResult, SimStage  # noqa: F401
from .runner import Runner, StageArgs  # noqa: F401
from .plan import Cluster, Layer, Plan, PlanStage, Profile, plan  # noqa: F401
from .world import BootstrapWorld, StoreWorld, ThreadWorld, Transport, World  # noqa: F401

__version__ = "0.1.0"
