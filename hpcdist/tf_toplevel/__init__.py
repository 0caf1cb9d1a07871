"""TF's top-level names beyond `hpcdist.core`: ``tf.function``, ``tf.Variable``, ``tf.config``.

The root package re-exports them (``hd.function``, ``hd.Variable``, ``hd.config``) next to the
tensor names of `hpcdist.core` (``hd.constant``, ``hd.cast``, ``hd.add_n``, ...), which sit in
layer 1; these sit in layer 5 because ``hd.Variable`` creates the current strategy's variable.
See docs/porting.md for the whole mapping. This package imports none of its modules, so that
``hd.function`` costs no strategy import (``hd.Variable`` loads the strategies).
"""
