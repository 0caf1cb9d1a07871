"""Writes checkpoints forever (until killed): every array holds the step number. argv: DIR."""

import sys

import numpy as np

import hpcdist as hd

directory = sys.argv[1]
step = hd.get_strategy().Variable(np.int64(0), trainable=False)
big = hd.get_strategy().Variable(np.zeros((256, 1024)))
small = hd.get_strategy().Variable(np.zeros(7))
manager = hd.CheckpointManager(
    hd.Checkpoint(step=step, big=big, small=small), directory, max_to_keep=3
)
manager.restore_or_initialize()
while True:
    s = int(step.numpy()) + 1
    step.assign(s)
    big.assign(np.full((256, 1024), float(s)))
    small.assign(np.full(7, float(s)))
    manager.save()
