"""What the libraries under rlvr print: quiet by default, everything with ``rlvr --verbose``. Set once at CLI
start-up, before the libraries are imported (environment variables reach worker processes too).

Quiet means: transformers logs errors only (its weight-loading report, generation-flag notes), no progress bars from
transformers, huggingface_hub or any library's tqdm (weight loading, shard writing, downloads, the embedded model's
GGUF conversion), DeepSpeed's "Setting accelerator to CPU" notice and its "built successfully" line on stdout dropped
(its other warnings stay), W&B silent (no banner or run summary; the run's link is in ``wandb/``), and peft's notes
at an adapter save (about the base model's files it cannot look at) dropped. Other Python warnings and rlvr's own
lines are untouched.
"""

from __future__ import annotations

import logging
import os

QUIET_ENV = {"TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
             "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1", "TQDM_DISABLE": "1", "WANDB_SILENT": "true"}
"""Environment variables set (unless the user set them) for a quiet run."""
DEEPSPEED_NOISE = ("Setting accelerator to CPU",)
"""Starts of DeepSpeed log messages dropped in a quiet run."""


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(DEEPSPEED_NOISE)


_QUIET = {"on": False}


def quiet() -> bool:
    """Whether :func:`configure` quieted the libraries (the CLI without ``--verbose``)."""
    return _QUIET["on"]


def configure(verbose: bool = False) -> None:
    """Quiet the libraries (``verbose`` False), or leave them as they are."""
    if verbose:
        return
    _QUIET["on"] = True
    import warnings

    warnings.filterwarnings("ignore", category=UserWarning, module=r"peft\.utils\.save_and_load")
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    ds = logging.getLogger("DeepSpeed")  # the logger DeepSpeed creates on import keeps this filter
    if not any(isinstance(f, _DropNoise) for f in ds.filters):
        ds.addFilter(_DropNoise())
    import sys

    if "transformers" in sys.modules:  # already imported: its verbosity was read from the environment then
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
