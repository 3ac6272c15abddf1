"""DMA: the descriptors (DCI) that move a tensor between host and device, and the engines.

``generate_dci`` builds torch-spyre's loop nests from a layout; ``dma_h2d``/``dma_d2h``
execute them, under ``jax.jit`` as XLA boxes and eagerly on the host engine (blocked
NumPy copies and a small C transpose kernel).
"""

from ._dci import DCI, Descriptor, LoopNest, generate_dci
from ._dma import dma_d2h, dma_h2d

__all__ = ["DCI", "Descriptor", "LoopNest", "dma_d2h", "dma_h2d", "generate_dci"]
