"""Models and weights in HDF5 files (Keras' ``save`` / ``load_model``, ``save_weights``).

No pickle and no code in the files.

A model file holds the model's config (JSON: the class name and constructor arguments of
each layer, and for a functional model the calls between them), its compile arguments when
they are Keras names, and every weight in `Layer.weights` order. `load_model` rebuilds the
model from hpcdist's layer classes, plus those passed in ``custom_objects`` (a subclassed model
or custom layer must implement ``get_config`` / ``from_config``). A weights file holds only
the weights. Collective under MPI: every rank calls, the chief writes, all ranks agree on the
outcome; every rank reads.
"""

from __future__ import annotations

import errno
import json
import os
from typing import Any

import h5py
import numpy as np

from hpcdist.checkpoint import (
    Checkpoint,
    CheckpointWriteError,
    checkpoint_communicator,
    is_checkpoint_chief,
)
from hpcdist.checkpoint.collective import agree
from hpcdist.nn import losses as losses_mod
from hpcdist.nn import optimizers as optimizers_mod
from hpcdist.nn.base_layer import Layer, get_registered_class
from hpcdist.nn.layer_config import constructor_parameters

__all__ = ["check_save_format", "load_model", "load_weights", "save_model", "save_weights"]

_MODEL, _WEIGHTS = "hpcdist.keras_model", "hpcdist.keras_weights"


def check_save_format(save_format: str | None, what: str) -> None:
    """Accept Keras 2's ``save_format`` when it names the one format (``"h5"``) or is None.

    Raises:
        ValueError: Another format (``"tf"``, ``"keras"``, ...).
    """
    if save_format is not None and str(save_format).lower() not in ("h5", "hdf5"):
        raise ValueError(
            f"{what}: save_format must be 'h5' or None (hpcdist writes HDF5 files), "
            f"got {save_format!r}"
        )


def _write(
    path: str, kind: str, model: Layer, attrs: dict[str, str], overwrite: bool = True
) -> None:
    weights = model.get_weights()  # every rank (a sharded variable gathers)
    comm = checkpoint_communicator()
    error = None
    if is_checkpoint_chief(comm):
        try:
            if not overwrite and os.path.exists(path):
                raise CheckpointWriteError(
                    errno.EEXIST,
                    f"{path!r} exists and overwrite=False: pass overwrite=True to replace it "
                    "(hpcdist does not ask on the terminal as Keras does: ranks have none)",
                    path,
                )
            directory = os.path.dirname(os.path.abspath(path))
            os.makedirs(directory, exist_ok=True)
            tmp = f"{path}.tmp-{os.getpid()}"
            with h5py.File(tmp, "w") as f:
                f.attrs["format"] = kind
                for key, value in attrs.items():
                    f.attrs[key] = value
                group = f.create_group("weights")
                for i, (var, value) in enumerate(zip(model.weights, weights, strict=True)):
                    dset = group.create_dataset(f"{i:05d}", data=np.asarray(value))
                    dset.attrs["name"] = str(var.name)
            os.replace(tmp, path)
        except Exception as exc:  # every rank must learn of it
            error = exc
    agree(comm, error, f"write {path!r}")


def _config_of(model: Layer) -> dict[str, Any]:
    return {"class_name": type(model).__name__, "config": model.get_config()}


def _arguments(obj: Any) -> dict[str, Any]:
    """``obj``'s scalar attributes that its constructor takes (its hyperparameters)."""
    params = constructor_parameters(obj)
    return {
        k: v for k, v in vars(obj).items() if k in params and isinstance(v, (bool, int, float, str))
    }


def _compile_config(model: Any) -> dict[str, Any] | None:
    """The compile arguments by Keras class name (None when not compiled or not built-in)."""
    optimizer, loss = getattr(model, "optimizer", None), getattr(model, "loss", None)
    if optimizer is None or loss is None:
        return None
    if getattr(optimizers_mod, type(optimizer).__name__, None) is not type(optimizer):
        return None
    if getattr(losses_mod, type(loss).__name__, None) is not type(loss):
        return None
    return {
        "optimizer": type(optimizer).__name__,
        "optimizer_config": optimizer.get_config(),
        "loss": type(loss).__name__,
        "loss_config": _arguments(loss),
        "metrics": [m.name for m in getattr(model, "compiled_metrics", [])],
        "weighted_metrics": model.weighted_metric_names,
    }


def save_model(model: Layer, path: str, overwrite: bool = True) -> None:
    """Write ``model`` (config, compile arguments and weights) to the HDF5 file ``path``.

    Args:
        model: The model.
        path: The file.
        overwrite: Replace an existing file; False raises instead (see `Model.save`).

    Raises:
        CheckpointWriteError: ``overwrite`` is False and ``path`` exists, or writing failed
            (on every rank).
        ValueError: The model (or a layer) has no config: a subclassed model without
            ``get_config``, or an argument such as a Python callable that cannot be saved.
    """
    attrs = {"model_config": json.dumps(_config_of(model))}
    compile_config = _compile_config(model)
    if compile_config is not None:
        attrs["compile_config"] = json.dumps(compile_config)
    _write(path, _MODEL, model, attrs, overwrite)


def save_weights(model: Layer, path: str, overwrite: bool = True) -> None:
    """Write every weight of ``model`` to the HDF5 file ``path`` (``overwrite`` as `save_model`).

    Raises:
        CheckpointWriteError: ``overwrite`` is False and ``path`` exists, or writing failed.
    """
    _write(path, _WEIGHTS, model, {}, overwrite)


def _read(path: str) -> tuple[dict[str, Any], list[np.ndarray]]:
    with h5py.File(path, "r") as f:
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        group = f["weights"]
        arrays = [group[key][()] for key in sorted(group)]
    return attrs, arrays


def load_weights(model: Layer, path: str) -> None:
    """Assign the weights saved in ``path`` (by `save_weights` or `save_model`) to ``model``.

    A checkpoint written by `hpcdist.checkpoint.Checkpoint` (``ModelCheckpoint`` with
    ``save_weights_only``) is restored through `Checkpoint.read`.

    Raises:
        FileNotFoundError: No such file.
        ValueError: The model is not built, or the number or shapes of weights differ.
    """
    if not os.path.exists(path) and os.path.exists(f"{path}.h5"):
        path = f"{path}.h5"
    if not os.path.exists(path):
        raise FileNotFoundError(f"no weights file at {path!r}")
    with h5py.File(path, "r") as f:
        kind = f.attrs.get("format")
    if kind not in (_MODEL, _WEIGHTS):
        Checkpoint(model=model).read(path)
        return
    if not model.built:
        raise ValueError(
            f"{model.name} is not built: call it on a batch (or give input_shape) before "
            f"load_weights({path!r})"
        )
    _, arrays = _read(path)
    model.set_weights(arrays)


def load_model(
    path: str, custom_objects: dict[str, Any] | None = None, compile: bool = True
) -> Any:
    """The model saved by ``model.save(path)``, with its weights (and compiled, if it was).

    Args:
        path: The HDF5 file.
        custom_objects: Classes by name for layers and models that are not hpcdist's.
        compile: Compile with the saved optimizer, loss and metrics when they were saved.

    Raises:
        FileNotFoundError: No such file.
        ValueError: The file is not a saved model, or names a class that is not known.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(f"no model file at {path!r}")
    attrs, arrays = _read(path)
    if attrs.get("format") != _MODEL:
        raise ValueError(
            f"{path!r} is not a model saved by model.save (format {attrs.get('format')!r})"
        )
    config = json.loads(attrs["model_config"])
    cls = get_registered_class(config["class_name"], custom_objects)
    try:
        model = cls.from_config(config["config"], custom_objects=custom_objects)
    except TypeError:
        model = cls.from_config(config["config"])
    if not model.built and len(arrays):
        raise ValueError(
            f"{path!r}: the rebuilt {config['class_name']} has no weights yet; give its first "
            "layer an input_shape (or use a functional model) to load its weights"
        )
    model.set_weights(arrays)
    if compile and "compile_config" in attrs and hasattr(model, "compile"):
        model.compile(**_compile_arguments(json.loads(attrs["compile_config"])))
    return model


def _compile_arguments(config: dict[str, Any]) -> dict[str, Any]:
    optimizer_cls = getattr(optimizers_mod, config["optimizer"])
    loss_cls = getattr(losses_mod, config["loss"])
    return {
        "optimizer": optimizer_cls.from_config(config["optimizer_config"]),
        "loss": loss_cls(**config["loss_config"]),
        "metrics": config["metrics"],
        "weighted_metrics": config.get("weighted_metrics", []),
    }
