"""What the libraries under rlvr print: quiet by default, everything with ``rlvr --verbose``. Set once at CLI
start-up, before the libraries are imported (environment variables reach worker processes too).

Quiet means: transformers logs errors only (its weight-loading report, generation-flag notes), no progress bars from
transformers or huggingface_hub (weight loading, shard writing, downloads), and DeepSpeed's "Setting accelerator to
CPU" notice dropped (its other warnings stay). Python warnings and rlvr's own lines are untouched.
"""

from __future__ import annotations

import logging
import os

QUIET_ENV = {"TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
             "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
"""Environment variables set (unless the user set them) for a quiet run."""
DEEPSPEED_NOISE = ("Setting accelerator to CPU",)
"""Starts of DeepSpeed log messages dropped in a quiet run."""


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(DEEPSPEED_NOISE)


def configure(verbose: bool = False) -> None:
    """Quiet the libraries (``verbose`` False), or leave them as they are."""
    if verbose:
        return
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
