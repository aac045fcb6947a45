"""Run logging: JSONL + TensorBoard metrics (optionally Weights & Biases) and progress bars."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from typing import Any

from tqdm.auto import tqdm

from icrl_jax.core.errors import UserError, did_you_mean
from icrl_jax.core.extras import import_extra
from icrl_jax.core.files import make_dirs, writing

WANDB_MODES = ("offline", "online", "disabled")

#: The one W&B run this process logs to, as (absolute workdir, run): every phase of a workdir
#: (train, eval) goes to the same run; a logger for another workdir finishes it first.
_wandb_run: tuple[str, Any] | None = None


def progress(total: int, desc: str, initial: int = 0, disable: bool = False,
             unit: str = "it"):
    """A tqdm bar counting `unit`s (large counts and rates shown as 12.3k); disabled
    automatically when stderr is not a terminal and CI is set."""
    disable = disable or (os.environ.get("CI") == "true" and not sys.stderr.isatty())
    return tqdm(total=total, initial=initial, desc=desc, disable=disable, dynamic_ncols=True,
                unit=unit, unit_scale=unit != "it")


def wandb_run_id(workdir: str) -> str:
    """The W&B run id of `workdir`: its name plus a hash of its absolute path, so that a rerun
    or resumed job (`resume="allow"`) logs to the same run and other workdirs never collide."""
    path = os.path.abspath(workdir)
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", os.path.basename(path))[:40].strip("-") or "run"
    return f"{name}-{hashlib.sha1(path.encode()).hexdigest()[:12]}"


def _wandb_for(workdir: str, project: str, mode: str, run_config: dict | None):
    """The W&B run of `workdir`, started on first use in this process."""
    global _wandb_run
    if mode not in WANDB_MODES:
        raise UserError(f"unknown log.wandb_mode {mode!r}{did_you_mean(mode, WANDB_MODES)} "
                        f"(available: {', '.join(WANDB_MODES)})")
    wandb = import_extra("wandb", "log.wandb=True")
    path = os.path.abspath(workdir)
    if _wandb_run is not None and _wandb_run[0] == path:
        return _wandb_run[1]
    if _wandb_run is not None:  # one run at a time; its files are flushed in the background
        run, _wandb_run = _wandb_run[1], None
        run.finish()
    run = wandb.init(project=project, mode=mode, dir=path, config=run_config, resume="allow",
                     id=wandb_run_id(path), name=os.path.basename(path))
    _wandb_run = (path, run)
    return run


def finish_wandb() -> None:
    """Finish this process's W&B run, if any, and wait until every run's files are written.

    `run.finish()` alone returns before wandb's service has written the offline run file (it
    can still hold only its header), so this also calls `wandb.teardown()`, as wandb does on
    exit; the next run starts a new service."""
    global _wandb_run
    if _wandb_run is not None:
        run, _wandb_run = _wandb_run[1], None
        run.finish()
        import wandb
        wandb.teardown()


class MetricsLogger:
    """Appends `{"step": s, "phase": p, **metrics}` lines to `workdir/metrics.jsonl` and writes
    the same scalars to TensorBoard under `workdir/tensorboard`.

    With `wandb=True` they also go to Weights & Biases as `<phase>/<name>` (`train/loss`), in
    the one run of `workdir` per process (`wandb_run_id`, files under `workdir/wandb`);
    `wandb_mode="offline"` needs no network or account (`wandb sync` uploads later).
    `run_config` is recorded as the run's config. Closing the logger leaves the run open for
    the next phase; `finish_wandb()` (or the end of the process) finishes it.
    """

    def __init__(self, workdir: str, phase: str, wandb: bool = False,
                 wandb_project: str = "icrl-jax", wandb_mode: str = "offline",
                 run_config: dict | None = None):
        make_dirs(workdir)
        self.phase = phase
        # W&B first: a missing package or bad mode fails before any file is opened.
        self.wandb = _wandb_for(workdir, wandb_project, wandb_mode, run_config) if wandb else None
        self.path = os.path.join(workdir, "metrics.jsonl")
        with writing(self.path):  # a refused write is one line naming the file
            self.jsonl = open(self.path, "a")
        from tensorboardX import SummaryWriter
        self.tb_dir = os.path.join(workdir, "tensorboard")
        with writing(self.tb_dir):
            self.tb = SummaryWriter(self.tb_dir)

    def write(self, step: int, metrics: dict[str, float]) -> None:
        with writing(self.path):
            self.jsonl.write(json.dumps({"step": int(step), "phase": self.phase,
                                         **{k: float(v) for k, v in metrics.items()}}) + "\n")
            self.jsonl.flush()
        for name, value in metrics.items():
            self.tb.add_scalar(f"{self.phase}/{name}", float(value), int(step))
        if self.wandb is not None:
            self.wandb.log({f"{self.phase}/{k}": float(v) for k, v in metrics.items()},
                           step=int(step))

    def close(self) -> None:
        """Flush and close the files. Closing while another error propagates (a `finally` after
        a failed checkpoint write) leaves the report to that error."""
        failing = sys.exc_info()[1] is not None
        for path, file in ((self.path, self.jsonl), (self.tb_dir, self.tb)):
            try:
                with writing(path):
                    file.close()
            except UserError:
                if not failing:
                    raise
