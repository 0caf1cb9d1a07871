"""TensorFlow 2.21 beside hpcdist in one process: set TF up before anything else touches it.

The suite needs TensorFlow (``make conformance`` builds ``.venv-conformance`` with it); where
TensorFlow is not importable, as in hpcdist's own venv, every module of the directory is skipped
(`helpers` calls ``pytest.importorskip``; a conftest cannot skip when pytest was pointed at its
directory, it would abort the run). TF is imported first, quiet, with the one physical CPU split
into two logical devices, so that
``tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])`` has two replicas, as hpcdist's
``MirroredStrategy(["cpu:0", "cpu:1"])`` does, and oneDNN off (TF's reference kernels).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# oneDNN's kernels change float round-off (and announce it on stderr): TF's reference kernels
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

try:
    import tensorflow as tf
except ImportError:
    tf = None

if tf is not None:
    _cpu = tf.config.list_physical_devices("CPU")[0]
    if tf.config.get_logical_device_configuration(_cpu) is None:
        tf.config.set_logical_device_configuration(
            _cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
        )
    assert len(tf.config.list_logical_devices("CPU")) == 2, "TF needs 2 logical CPU devices"
