"""Run logging: JSONL + TensorBoard metrics and progress bars."""

from __future__ import annotations

import json
import os
import sys

from tqdm.auto import tqdm


def progress(total: int, desc: str, initial: int = 0, disable: bool = False):
    """A tqdm bar; disabled automatically when stderr is not a terminal and CI is set."""
    disable = disable or (os.environ.get("CI") == "true" and not sys.stderr.isatty())
    return tqdm(total=total, initial=initial, desc=desc, disable=disable, dynamic_ncols=True)


class MetricsLogger:
    """Appends `{"step": s, "phase": p, **metrics}` lines to `workdir/metrics.jsonl` and writes
    the same scalars to TensorBoard under `workdir/tensorboard`."""

    def __init__(self, workdir: str, phase: str):
        os.makedirs(workdir, exist_ok=True)
        self.phase = phase
        self.jsonl = open(os.path.join(workdir, "metrics.jsonl"), "a")
        from tensorboardX import SummaryWriter
        self.tb = SummaryWriter(os.path.join(workdir, "tensorboard"))

    def write(self, step: int, metrics: dict[str, float]) -> None:
        self.jsonl.write(json.dumps({"step": int(step), "phase": self.phase,
                                     **{k: float(v) for k, v in metrics.items()}}) + "\n")
        self.jsonl.flush()
        for name, value in metrics.items():
            self.tb.add_scalar(f"{self.phase}/{name}", float(value), int(step))

    def close(self) -> None:
        self.jsonl.close()
        self.tb.close()
