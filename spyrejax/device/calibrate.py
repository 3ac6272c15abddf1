"""``python -m spyrejax.device.calibrate FILE [--lx-fraction F] [--plot PNG]``.

Prints, per shape of a measured sweep of matmul divisions, the card's best division and
time, the model's pick and the card's time for it, predicted vs measured for the best,
and the Spearman rank correlation. The function is ``spyrejax.device.calibrate``
(:mod:`spyrejax.device._calibrate`).
"""

from __future__ import annotations

import sys

from ._calibrate import main

if __name__ == "__main__":
    sys.exit(main())
