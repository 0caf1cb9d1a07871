"""Parameter-server training: variables in one-sided RMA windows on ps ranks, async workers.

Modules, in the order they import each other: `runtime` (roles and the serve loop), `store`
(RMA windows), `partitioners`, `variables` (`PSVariable`, `ShardedVariable`), `strategy`
(`ParameterServerStrategy`) and `coordinator` (`ClusterCoordinator`, `RemoteValue`).
"""
