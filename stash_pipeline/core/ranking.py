"""Agreement of two rankings of the same items (e.g. one model's scores in bf16 and in fp32)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b of two score lists over the same items: 1 when they order every pair alike.

    Ties count as in tau-b (neither concordant nor discordant, and they shrink the denominator).
    Quadratic in the items: meant for the few thousand scores a check compares.
    """
    if len(a) != len(b):
        raise ValueError(f"{len(a)} scores against {len(b)}")
    concordant = discordant = ties_a = ties_b = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                concordant += 1
            else:
                discordant += 1
    denominator = math.sqrt((concordant + discordant + ties_a) * (concordant + discordant + ties_b))
    return (concordant - discordant) / denominator if denominator else 1.0
