"""Cluster resolution: who is in the job and where."""

from hpcdist.cluster.base import ROLES, ClusterResolver, assign_jobs, format_master_url, is_chief
from hpcdist.cluster.hostlist import compress_hostlist, expand_hostlist, expand_tasks_per_node
from hpcdist.cluster.mpi import MPIClusterResolver
from hpcdist.cluster.resolve import resolve
from hpcdist.cluster.simple import SimpleClusterResolver
from hpcdist.cluster.slurm import SlurmClusterResolver
from hpcdist.cluster.spec import ClusterSpec
from hpcdist.cluster.tfconfig import TFConfigClusterResolver
from hpcdist.cluster.topology import NodeLayout, node_layout

__all__ = [
    "ROLES",
    "ClusterResolver",
    "ClusterSpec",
    "MPIClusterResolver",
    "NodeLayout",
    "SimpleClusterResolver",
    "SlurmClusterResolver",
    "TFConfigClusterResolver",
    "assign_jobs",
    "compress_hostlist",
    "expand_hostlist",
    "expand_tasks_per_node",
    "format_master_url",
    "is_chief",
    "node_layout",
    "resolve",
]
