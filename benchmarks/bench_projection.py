"""Speed of the BAP projection: 1 000 000 (point, micro-lens) pairs to (u, v, ρ).

Target (foundation issue): < 0.5 s on the 2-core reference machine. Prints JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, time_runs

from plenocal.io.libpleno import camera_from_intrinsics
from plenocal.model import micro_image_centres, project_bap

FIXTURE = Path(__file__).resolve().parents[1] / ".." / "shared" / "fixtures" / "libpleno-r12a-configs"


def main() -> None:
    cam = camera_from_intrinsics(FIXTURE / "intrinsics.js")
    rng = np.random.default_rng(0)
    n = 1_000_000
    pts = np.stack([rng.uniform(-40, 40, n), rng.uniform(-30, 30, n), rng.uniform(200, 400, n)], axis=1)
    k = rng.integers(0, 176, n)
    l = rng.integers(0, 152, n)
    bap = time_runs(lambda: project_bap(cam, pts, k, l), runs=5)
    kk, ll = cam.mla.lattice.all_indices()
    mic = time_runs(lambda: micro_image_centres(cam, kk, ll), runs=5)
    print(
        json.dumps(
            {
                "benchmark": "projection",
                "n_pairs": n,
                "project_bap": bap,
                "target_s": 0.5,
                "project_mic_all_26752": mic,
                "machine": machine(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
