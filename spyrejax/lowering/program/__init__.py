"""A plan run and measured: the interpreter, the device model applied to a plan, per-core runs.

The interpreter (``_interpret``) runs a planned graph with Spyre primitives and records
what each node binds (``_record``); ``_program`` turns that record into the device
model's program and ``_annotated`` writes its LX placement into the jaxpr's types (the
:class:`~spyrejax.layout.Residency` value itself is ``layout/_residency``); ``_device``
holds the ``with_division`` hint; ``_cores`` runs each divided op core by core
(``emulate="cores"``) and checks it (``checking_cores``).
"""

from ._cores import CoreCheck, Mismatch, checking_cores
from ._device import with_division
from ._interpret import device_program

__all__ = ["CoreCheck", "Mismatch", "checking_cores", "device_program", "with_division"]
