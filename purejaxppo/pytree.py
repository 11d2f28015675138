"""`dataclass`: a frozen dataclass that is a JAX pytree (every field a child), with `replace`.

The same pytree as `flax.struct.dataclass` (children keyed by attribute name), without
importing flax: `import flax` imports flax.linen, and with it rich.
"""

from __future__ import annotations

import dataclasses

import jax


def dataclass(cls):
    cls = dataclasses.dataclass(frozen=True)(cls)
    cls.replace = dataclasses.replace
    return jax.tree_util.register_dataclass(cls, [f.name for f in dataclasses.fields(cls)], [])
