"""Where prompt rows come from. Every source yields plain dicts (one per prompt) with at least the prompt field.

Errors: :class:`DataError`, naming the file/dataset and what was expected, raised before any model is loaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlvr.config import DataConfig, HFSource, HumanEvalSource, JsonlSource, ReasoningGymSource


class DataError(ValueError):
    """The recipe's dataset cannot be read or lacks what the verifiers need."""


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open() as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}:{lineno}: expected a JSON object per line, got {type(row).__name__}")
            rows.append(row)
    return rows


def _load_file(src: JsonlSource) -> list[dict[str, Any]]:
    path = Path(src.path).expanduser()
    if not path.is_file():
        searched = getattr(src, "_searched", ())
        where = f" (looked in {' and '.join(searched)})" if searched else ""
        raise DataError(f"data.source.path: file not found: {path}{where}")
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq
            return pq.read_table(path).to_pylist()
        return _read_jsonl(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"data.source.path: cannot read {path}: {exc}") from None


def _load_hf(src: HFSource) -> list[dict[str, Any]]:
    import datasets

    try:
        if Path(src.name).expanduser().is_dir():
            ds = datasets.load_from_disk(str(Path(src.name).expanduser()))
            ds = ds[src.split] if isinstance(ds, datasets.DatasetDict) else ds
        else:
            from rlvr.models.hub import ensure_hub_or_offline

            ensure_hub_or_offline(f"data.source.name={src.name!r}")
            ds = datasets.load_dataset(src.name, src.subset, split=src.split)
    except Exception as exc:  # offline hub, unknown name/split
        raise DataError(f"data.source: cannot load HF dataset {src.name!r} (subset={src.subset}, split={src.split}): "
                        f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}") from None
    return [dict(r) for r in ds]


def _load_reasoning_gym(src: ReasoningGymSource) -> list[dict[str, Any]]:
    import reasoning_gym

    try:
        ds = reasoning_gym.create_dataset(src.task, seed=src.seed, size=src.size, **src.config)
    except Exception as exc:
        raise DataError(f"data.source: reasoning-gym task {src.task!r} with config {src.config}: "
                        f"{type(exc).__name__}: {exc}") from None
    return [{"question": e["question"], "answer": str(e["answer"]), "metadata": e.get("metadata", {})} for e in ds]


def _load_humaneval(src: HumanEvalSource) -> list[dict[str, Any]]:
    from rlvr.data.humaneval import load_humaneval
    return load_humaneval()


def load_rows(cfg: DataConfig) -> list[dict[str, Any]]:
    """All rows of the recipe's dataset, checked for the prompt and answer fields.

    Raises:
        DataError: unreadable source, an empty dataset, or a row missing ``prompt_field`` / ``answer_field`` (or
            ``shot_field`` when there are few-shot examples; the message names the first bad row and its fields).
    """
    src = cfg.source
    loaders = {"jsonl": _load_file, "hf": _load_hf, "reasoning_gym": _load_reasoning_gym,
               "humaneval": _load_humaneval}
    rows = loaders[src.type](src)
    if not rows:
        raise DataError(f"data.source ({src.type}) holds no rows: an empty dataset cannot be trained on")
    fields = [(cfg.prompt_field, "data.prompt_field"), (cfg.answer_field, "data.answer_field")]
    if cfg.few_shot and cfg.shot_field is not None:
        fields.append((cfg.shot_field, "data.shot_field"))
    for i, row in enumerate(rows):
        for field_name, role in fields:
            if field_name is not None and (field_name not in row or row[field_name] is None):
                raise DataError(f"row {i} has no {field_name!r} field ({role}); its fields are {sorted(row)}. "
                                f"Set {role} to the right column, or fix the data.")
    return rows
