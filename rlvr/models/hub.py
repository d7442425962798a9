"""The model hub when it cannot answer: offline mode (``HF_HUB_OFFLINE=1``) is detected, or switched on after one
quick probe, so a hub name costs one clear line instead of a minute of download retries.

:func:`ensure_hub_or_offline` is called before a hub model or dataset is looked up. With ``HF_HUB_OFFLINE`` unset it
opens one TCP connection to the hub's endpoint (``HF_ENDPOINT``, default ``https://huggingface.co``); where none
answers within a few seconds it turns offline mode on for the rest of the process (the environment variable, which
forked workers inherit, and the flags of the hub libraries already imported) and prints one line saying so. Only the
local hub cache is used from then on. Imports no torch.
"""

from __future__ import annotations

import os
import socket
import sys
from urllib.parse import urlparse

PROBE_TIMEOUT_S = 3.0
_probed: bool | None = None  # the probe's answer, once per process


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set to a true value."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().lower() in ("1", "true", "yes", "on")


def hub_answers(endpoint: str | None = None, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the hub's host opens within ``timeout_s`` (DNS failure, refusal or silence: no)."""
    url = urlparse(endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def set_offline() -> None:
    """Offline mode for this process and its children: the environment and the imported hub libraries' flags."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    for module, attr in (("huggingface_hub.constants", "HF_HUB_OFFLINE"), ("datasets.config", "HF_HUB_OFFLINE")):
        mod = sys.modules.get(module)
        if mod is not None and hasattr(mod, attr):
            setattr(mod, attr, True)


def ensure_hub_or_offline(what: str = "") -> bool:
    """True when the hub may be asked (offline mode is off and the hub answered the probe); otherwise offline mode
    is on, and the first call that found the hub silent printed one line (naming ``what`` was being looked up)."""
    global _probed
    if hub_offline():
        return False
    if _probed is None:
        _probed = hub_answers()
        if not _probed:
            set_offline()
            endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
            print(f"[rlvr] the model hub ({endpoint}) does not answer: working offline (HF_HUB_OFFLINE=1), from the "
                  f"local hub cache only{f' (looking up {what})' if what else ''}", file=sys.stderr, flush=True)
    return _probed and not hub_offline()
