"""Suite-wide test ordering.

The vLLM tests run last: a ``vllm.LLM`` in this process sets up torch.distributed's default group for itself, and a
DeepSpeed engine built after it in the same process fails with "Group ... is not registered". Every other test keeps
its order.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("vllm") is not None)  # stable: the rest keep their order
