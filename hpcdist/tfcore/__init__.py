"""TF's core names beyond `hpcdist.core`: ``tf.function``, ``tf.Variable``, ``tf.config``.

The root package re-exports them (``hd.function``, ``hd.Variable``, ``hd.config``) next to the
tensor operations of `hpcdist.core` (``hd.constant``, ``hd.cast``, ``hd.add_n``, ...); see
docs/porting.md for the whole mapping. This package imports none of its modules, so that
``hd.function`` costs no strategy import (``hd.Variable`` loads the strategies).
"""
