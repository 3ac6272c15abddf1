"""The public API as a type checker sees it (checked by `make typecheck`, never run by pytest).

Every name a user reaches as ``spyrejax.<name>`` must resolve to its definition, with
its types: a name written into the namespace at run time (``globals().update``) would
be an error here.
"""

from typing import assert_type

import jax
import numpy as np

import spyrejax as sj

x = sj.to_device(np.ones((4, 64), np.float32))
assert_type(x, sj.SpyreArray)
assert_type(sj.exp(x), sj.SpyreArray)
assert_type(sj.add(x, 1.0), sj.SpyreArray)
assert_type(sj.where(sj.lt(x, 0.5), x, 0.0), sj.SpyreArray)
assert_type(sj.sum(x, axis=1, keepdims=True), sj.SpyreArray)
assert_type(sj.matmul(x, sj.transpose(x, (1, 0))), sj.SpyreArray)
assert_type(sj.to_host(x), jax.Array)
layout = sj.SpyreTensorLayout
fn = sj.jit(lambda a: sj.relu(a))
