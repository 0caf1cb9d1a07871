"""``tf.train`` of the TF1 layer: cluster, server, optimizers, sessions, hooks, checkpoints."""

from hpcdist.cluster.spec import ClusterSpec
from hpcdist.compat.v1.device_setter import STANDARD_PS_OPS, replica_device_setter
from hpcdist.compat.v1.hooks import (
    CheckpointSaverHook,
    CheckpointSaverListener,
    FeedFnHook,
    FinalOpsHook,
    LoggingTensorHook,
    NanLossDuringTrainingError,
    NanTensorHook,
    SecondOrStepTimer,
    StepCounterHook,
    StopAtStepHook,
    SummarySaverHook,
)
from hpcdist.compat.v1.monitored_session import (
    ChiefSessionCreator,
    MonitoredSession,
    MonitoredTrainingSession,
    Scaffold,
    SingularMonitoredSession,
    WorkerSessionCreator,
)
from hpcdist.compat.v1.optimizers import (
    AdagradOptimizer,
    AdamOptimizer,
    GradientDescentOptimizer,
    MomentumOptimizer,
    Optimizer,
    RMSPropOptimizer,
)
from hpcdist.compat.v1.saver import (
    Saver,
    checkpoint_exists,
    get_checkpoint_state,
    latest_checkpoint,
)
from hpcdist.compat.v1.server import Server, ServerDef
from hpcdist.compat.v1.session_run_hook import (
    SessionRunArgs,
    SessionRunContext,
    SessionRunHook,
    SessionRunValues,
)
from hpcdist.compat.v1.sync_replicas import SyncReplicasOptimizer
from hpcdist.compat.v1.variables import (
    create_global_step,
    get_global_step,
    get_or_create_global_step,
)

__all__ = [
    "STANDARD_PS_OPS",
    "AdagradOptimizer",
    "AdamOptimizer",
    "CheckpointSaverHook",
    "CheckpointSaverListener",
    "ChiefSessionCreator",
    "ClusterSpec",
    "FeedFnHook",
    "FinalOpsHook",
    "GradientDescentOptimizer",
    "LoggingTensorHook",
    "MomentumOptimizer",
    "MonitoredSession",
    "MonitoredTrainingSession",
    "NanLossDuringTrainingError",
    "NanTensorHook",
    "Optimizer",
    "RMSPropOptimizer",
    "Saver",
    "Scaffold",
    "SecondOrStepTimer",
    "Server",
    "ServerDef",
    "SessionRunArgs",
    "SessionRunContext",
    "SessionRunHook",
    "SessionRunValues",
    "SingularMonitoredSession",
    "StepCounterHook",
    "StopAtStepHook",
    "SummarySaverHook",
    "SyncReplicasOptimizer",
    "WorkerSessionCreator",
    "checkpoint_exists",
    "create_global_step",
    "get_checkpoint_state",
    "get_global_step",
    "get_or_create_global_step",
    "latest_checkpoint",
    "replica_device_setter",
]
