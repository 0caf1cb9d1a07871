"""TensorFlow's ``tf.train.Example`` protocol buffers, from TF's own message definitions.

The messages are those of TF's ``tensorflow/core/example/feature.proto`` and ``example.proto``
(same field numbers, types and packing, so the bytes on the wire are TF's), described here as a
``FileDescriptorProto`` and turned into classes by the ``protobuf`` runtime (its C ``upb``
parser does the decoding). They live in a private descriptor pool: a process that also imports
TensorFlow, whose own ``tensorflow.Example`` sits in the default pool, has no name clash, and no
generated ``_pb2`` module ties hpcdist to one ``protoc`` version.

The definitions, as in TF::

    message BytesList { repeated bytes value = 1; }
    message FloatList { repeated float value = 1 [packed = true]; }
    message Int64List { repeated int64 value = 1 [packed = true, jstype = JS_STRING]; }
    message Feature {
      oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; }
    }
    message Features { map<string, Feature> feature = 1; }
    message FeatureList { repeated Feature feature = 1; }
    message FeatureLists { map<string, FeatureList> feature_list = 1; }
    message Example { Features features = 1; }
    message SequenceExample { Features context = 1; FeatureLists feature_lists = 2; }
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = [
    "BytesList",
    "Example",
    "Feature",
    "FeatureList",
    "FeatureLists",
    "Features",
    "FloatList",
    "Int64List",
    "SequenceExample",
]

_F = descriptor_pb2.FieldDescriptorProto
_PACKAGE = "tensorflow"


def _field(
    message: descriptor_pb2.DescriptorProto,
    name: str,
    number: int,
    kind: int,
    *,
    repeated: bool = False,
    type_name: str = "",
    packed: bool = False,
    oneof: int | None = None,
) -> None:
    """Add field ``name = number`` to ``message``."""
    field = message.field.add(name=name, number=number, type=kind)
    field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    if type_name:
        field.type_name = f".{_PACKAGE}.{type_name}"
    if packed:
        field.options.packed = True
    if oneof is not None:
        field.oneof_index = oneof


def _map_entry(message: descriptor_pb2.DescriptorProto, name: str, value_type: str) -> None:
    """The nested ``<Name>Entry`` message a ``map<string, value_type>`` field is made of."""
    entry = message.nested_type.add(name=name)
    entry.options.map_entry = True
    _field(entry, "key", 1, _F.TYPE_STRING)
    _field(entry, "value", 2, _F.TYPE_MESSAGE, type_name=value_type)


def _feature_file() -> descriptor_pb2.FileDescriptorProto:
    """TF's ``feature.proto``."""
    fd = descriptor_pb2.FileDescriptorProto(
        name="hpcdist/io/feature.proto", package=_PACKAGE, syntax="proto3"
    )
    _field(fd.message_type.add(name="BytesList"), "value", 1, _F.TYPE_BYTES, repeated=True)
    for name, kind in (("FloatList", _F.TYPE_FLOAT), ("Int64List", _F.TYPE_INT64)):
        _field(fd.message_type.add(name=name), "value", 1, kind, repeated=True, packed=True)
    # TF's int64 values are strings in JSON for JavaScript (jstype = JS_STRING)
    fd.message_type[2].field[0].options.jstype = descriptor_pb2.FieldOptions.JS_STRING
    feature = fd.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, (name, type_name) in enumerate(
        (("bytes_list", "BytesList"), ("float_list", "FloatList"), ("int64_list", "Int64List")),
        1,
    ):
        _field(feature, name, number, _F.TYPE_MESSAGE, type_name=type_name, oneof=0)
    features = fd.message_type.add(name="Features")
    _map_entry(features, "FeatureEntry", "Feature")
    _field(
        features,
        "feature",
        1,
        _F.TYPE_MESSAGE,
        repeated=True,
        type_name="Features.FeatureEntry",
    )
    feature_list = fd.message_type.add(name="FeatureList")
    _field(feature_list, "feature", 1, _F.TYPE_MESSAGE, repeated=True, type_name="Feature")
    feature_lists = fd.message_type.add(name="FeatureLists")
    _map_entry(feature_lists, "FeatureListEntry", "FeatureList")
    _field(
        feature_lists,
        "feature_list",
        1,
        _F.TYPE_MESSAGE,
        repeated=True,
        type_name="FeatureLists.FeatureListEntry",
    )
    return fd


def _example_file() -> descriptor_pb2.FileDescriptorProto:
    """TF's ``example.proto``."""
    fd = descriptor_pb2.FileDescriptorProto(
        name="hpcdist/io/example.proto",
        package=_PACKAGE,
        syntax="proto3",
        dependency=["hpcdist/io/feature.proto"],
    )
    example = fd.message_type.add(name="Example")
    _field(example, "features", 1, _F.TYPE_MESSAGE, type_name="Features")
    sequence = fd.message_type.add(name="SequenceExample")
    _field(sequence, "context", 1, _F.TYPE_MESSAGE, type_name="Features")
    _field(sequence, "feature_lists", 2, _F.TYPE_MESSAGE, type_name="FeatureLists")
    return fd


POOL = descriptor_pool.DescriptorPool()
POOL.Add(_feature_file())
POOL.Add(_example_file())


def _message(name: str) -> type:
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(f"{_PACKAGE}.{name}"))


BytesList = _message("BytesList")
FloatList = _message("FloatList")
Int64List = _message("Int64List")
Feature = _message("Feature")
Features = _message("Features")
FeatureList = _message("FeatureList")
FeatureLists = _message("FeatureLists")
Example = _message("Example")
SequenceExample = _message("SequenceExample")
