"""Build of spyrejax's one C extension; everything else is in ``pyproject.toml``.

``spyrejax.dma._transpose`` is the host DMA engine's element-transpose kernel. It is
optional: built without a C compiler, spyrejax still installs and runs transposed
transfers in XLA instead (see ``spyrejax/dma/_host_dma.py``).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("spyrejax.dma._transpose", ["spyrejax/dma/_transpose.c"], optional=True),
    ]
)
