"""The two TF1 namespaces the TF1 conformance cases are written against.

A case is written once for both libraries; the one porting edit is `V1.tensor`: where TF1 code
builds a tensor (``loss = tf.reduce_mean(...)``), hpcdist takes a function (``def loss(): ...``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import hpcdist.compat.v1 as hd_v1
from tests.conformance.helpers import tf


@dataclass(frozen=True)
class V1:
    """One library's TF1 namespace (``tf.compat.v1`` or ``hpcdist.compat.v1``)."""

    name: str
    tf: Any

    def tensor(self, build: Callable[[], Any]) -> Any:
        """A TF1 tensor: built now in TF's graph; hpcdist evaluates the function per run."""
        return build() if self.name == "tf" else build


TF1, HD1 = V1("tf", tf.compat.v1), V1("hpcdist", hd_v1)
