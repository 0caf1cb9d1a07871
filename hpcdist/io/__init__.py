"""TensorFlow's ``tf.io`` for input data: TFRecord files and ``tf.train.Example`` parsing.

`TFRecordWriter` and `TFRecordOptions` write TF's record files (masked CRC-32C framing, plain,
ZLIB or GZIP); ``hpcdist.data.TFRecordDataset`` reads them. `parse_example` and
`parse_single_example` parse ``tf.train.Example`` protos (the message classes are in
`hpcdist.io.example_proto`) with `FixedLenFeature`, `FixedLenSequenceFeature` and
`VarLenFeature` specs into numpy arrays and `SparseTensorValue`.
"""

from hpcdist.data.tfrecord_options import TFRecordCompressionType, TFRecordOptions
from hpcdist.io.parsing import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    SparseTensorValue,
    VarLenFeature,
    parse_example,
    parse_single_example,
)
from hpcdist.io.records import TFRecordWriter

__all__ = [
    "FixedLenFeature",
    "FixedLenSequenceFeature",
    "SparseTensorValue",
    "TFRecordCompressionType",
    "TFRecordOptions",
    "TFRecordWriter",
    "VarLenFeature",
    "parse_example",
    "parse_single_example",
]
