"""The CPS-like feature columns the dashboard tests upload (a table the project does not bundle)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def cps_features(rng: np.random.Generator, n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "educ": rng.integers(8, 19, n),
            "exper": rng.integers(0, 45, n),
            "tenure": rng.integers(0, 30, n),
            "female": rng.integers(0, 2, n),
            "black": (rng.random(n) < 0.1).astype(int),
            "region": rng.choice(["north", "south", "east", "west"], n),
            "married": rng.integers(0, 2, n),
            "hours": rng.integers(20, 60, n).astype(float),
        }
    )
