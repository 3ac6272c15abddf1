"""What ``spyrejax.jit`` does with a function, for people and tools: ``explain`` and ``export``."""

from ._explain import explain
from ._export import Export, export
from ._report import Report

__all__ = ["Export", "Report", "explain", "export"]
