"""Build of spyrejax's one C extension; everything else is in ``pyproject.toml``.

``spyrejax.dma._transpose`` holds the host DMA engine's copy kernels (element transposes
and runs of whole sticks). It is optional: built without a C compiler, spyrejax still
installs, copies runs with NumPy and runs transposed transfers in XLA instead (see
``spyrejax/dma/_host_dma.py``).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("spyrejax.dma._transpose", ["spyrejax/dma/_transpose.c"], optional=True),
    ]
)
