"""Compatibility layers: `hpcdist.compat.v1` runs TF1 distributed-training programs."""
