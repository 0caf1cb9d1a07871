"""Parameter-server training: variables in one-sided RMA windows on ps ranks, async workers.

Modules, in the order they import each other: `roles` (who is who), `runtime` (what every rank
holds, and the process's runtime), `serving` (the serve loop of ps and worker ranks), `control`
(the coordinator's commands and results), `store` (RMA windows), `partitioners`, `variables`
(`PSVariable`, `ShardedVariable`), `strategy` (`ParameterServerStrategy`) and `coordinator`
(`ClusterCoordinator`, `RemoteValue`). Messages and windows go through `hpcdist.comm.p2p` and
`hpcdist.comm.rma`; waits through `hpcdist.utils.waiting`.
"""
