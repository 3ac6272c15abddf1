"""Build of spyrejax's C and C++ extensions; everything else is in ``pyproject.toml``.

Both are optional: built without a compiler (or without jaxlib's headers), spyrejax still
installs and runs the same transfers in NumPy and XLA, more slowly.

- ``spyrejax.dma._transpose`` holds the host DMA engine's copy kernels (element transposes
  and runs of whole sticks; see ``spyrejax/dma/_host_dma.py``).
- ``spyrejax.dma._tiles`` holds the XLA FFI handlers of host <-> device transfers inside
  ``jax.jit`` (see ``spyrejax/dma/_ffi.py``); it compiles against the FFI headers jaxlib
  ships, which ``pyproject.toml`` puts in the build environment.
"""

import os

from setuptools import Extension, setup


def _ffi_include() -> str | None:
    """The XLA FFI headers jaxlib ships (``jax.ffi.include_dir()``), if it is installed."""
    try:
        import jaxlib
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(jaxlib.__file__), "include")
    return path if os.path.isfile(os.path.join(path, "xla", "ffi", "api", "ffi.h")) else None


extensions = [Extension("spyrejax.dma._transpose", ["spyrejax/dma/_transpose.c"], optional=True)]
if (include := _ffi_include()) is not None:
    extensions.append(
        Extension(
            "spyrejax.dma._tiles",
            ["spyrejax/dma/_tiles.cc"],
            include_dirs=[include],
            language="c++",
            extra_compile_args=["-std=c++17", "-O3", "-Wno-return-type"],
            optional=True,
        )
    )

setup(ext_modules=extensions)
