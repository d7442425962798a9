"""Where prompt rows come from. Every source yields plain dicts (one per prompt) with at least the prompt field.

Errors: :class:`DataError`, naming the file/dataset and what was expected, raised before any model is loaded.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rlvr.config import DataConfig, HFSource, HumanEvalSource, JsonlSource, ReasoningGymSource


class DataError(ValueError):
    """The recipe's dataset cannot be read or lacks what the verifiers need."""


_ORIGIN: dict[int, tuple[dict[str, Any], str]] = {}
"""``id(row)`` -> (the row, where it came from: ``path:line`` for a JSONL file), filled in by :func:`load_rows` for the
rows of its last call. The row is kept beside its id so that a freed row's id, reused by a new dict, is not taken for
it."""


def row_origin(row: dict[str, Any], index: int | None = None) -> str:
    """Where ``row`` is in its dataset, as a user finds it: ``FILE:LINE`` for a JSONL file, else ``row N`` (1-based;
    ``index`` is its 0-based position when the origin was not recorded)."""
    known = _ORIGIN.get(id(row))
    return known[1] if known is not None and known[0] is row else f"row {(index or 0) + 1}"


MAX_INT_DIGITS = 4000
"""Integers in JSON with more digits than this are kept as their decimal text (exact): Python refuses to convert
longer digit strings to ``int`` and back (``sys.set_int_max_str_digits``), and a gold answer is compared as text."""


def _int_or_text(digits: str) -> int | str:
    return int(digits) if len(digits.lstrip("-")) <= MAX_INT_DIGITS else digits


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"{path}:{lineno}: not UTF-8 ({exc.reason} at byte {exc.start + 1} of the line)") \
                    from None
            if not line.strip():
                continue
            try:
                row = json.loads(line, parse_int=_int_or_text)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            except RecursionError:
                raise DataError(f"{path}:{lineno}: nested too deeply to read (a JSON value inside thousands of "
                                f"lists or objects)") from None
            except ValueError as exc:  # e.g. a number that does not convert
                raise DataError(f"{path}:{lineno}: not valid JSON ({str(exc)[:200]})") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}:{lineno}: expected a JSON object per line, got {type(row).__name__}")
            rows.append(row)
            _ORIGIN[id(row)] = (row, f"{path}:{lineno}")
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


def read_source(src: JsonlSource | HFSource, keep_origins: bool = False) -> list[dict[str, Any]]:
    """Every row of a JSONL/parquet file or a datasets hub name or folder, unchecked (an SFT or DPO recipe's source:
    the caller checks its own fields). ``keep_origins``: keep the file lines recorded by an earlier call (a second
    source of the same recipe), for :func:`row_origin`.

    Raises:
        DataError: an unreadable source, or one without rows.
    """
    if not keep_origins:
        _ORIGIN.clear()
    rows = _load_file(src) if src.type == "jsonl" else _load_hf(src)
    if not rows:
        raise DataError(f"{src.type} source {getattr(src, 'path', None) or getattr(src, 'name', '')} holds no rows")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataError(f"{row_origin(row, i)}: expected a mapping of fields, got {type(row).__name__}")
    return rows


def load_rows(cfg: DataConfig) -> list[dict[str, Any]]:
    """All rows of the recipe's dataset, checked for the prompt and answer fields.

    Raises:
        DataError: unreadable source, an empty dataset, or a row missing ``prompt_field`` / ``answer_field`` (or
            ``shot_field`` when there are few-shot examples; the message names the first bad row and its fields).
    """
    src = cfg.source
    loaders = {"jsonl": _load_file, "hf": _load_hf, "reasoning_gym": _load_reasoning_gym,
               "humaneval": _load_humaneval}
    _ORIGIN.clear()  # the origins of the rows this call returns, not of earlier loads
    rows = loaders[src.type](src)
    if not rows:
        raise DataError(f"data.source ({src.type}) holds no rows: an empty dataset cannot be trained on")
    fields = [(cfg.prompt_field, "data.prompt_field"), (cfg.answer_field, "data.answer_field")]
    if cfg.few_shot and cfg.shot_field is not None:
        fields.append((cfg.shot_field, "data.shot_field"))
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DataError(f"{row_origin(row, i)}: expected a mapping of fields, got {type(row).__name__}")
        for field_name, role in fields:
            if field_name is not None and field_name not in row:
                raise DataError(f"{row_origin(row, i)} has no {field_name!r} field ({role}); its fields are "
                                f"{sorted(row)}. Set {role} to the right column, or fix the data.")
            if field_name is not None and row[field_name] is None:
                raise DataError(f"{row_origin(row, i)}: {field_name!r} ({role}) is null; give it a value, or drop "
                                f"the row")
        _check_types(row, i, cfg)
    return rows


def _check_types(row: dict[str, Any], i: int, cfg: DataConfig) -> None:
    """The prompt is non-empty text; the gold answer is non-empty text or a finite number (a list, a mapping, a
    boolean or NaN would be stringified or score a silent 0, and an empty answer can never be matched); neither holds
    a lone surrogate (text no tokenizer can encode). Raises DataError naming the row."""
    prompt = row[cfg.prompt_field]
    what = f"{cfg.prompt_field!r} (data.prompt_field)"
    if isinstance(prompt, list):  # a conversation: [{"role": ..., "content": ...}, ...]
        from rlvr.data.templates import conversation_problem

        problem = conversation_problem(prompt)
        if problem is None and cfg.template == "r1":
            problem = "data.template r1 is plain text and takes a text prompt, not chat messages"
        if problem is not None:
            raise DataError(f"{row_origin(row, i)}: {what} holds chat messages, but {problem}")
        for m in prompt:
            _check_encodable(m["content"], row, i, what)
    elif not isinstance(prompt, str):
        raise DataError(f"{row_origin(row, i)}: {what} is a {type(prompt).__name__} ({_shown(prompt)}), not text or "
                        f"a list of chat messages")
    elif not prompt.strip():
        raise DataError(f"{row_origin(row, i)}: {what} is empty: there is no question to answer")
    else:
        _check_encodable(prompt, row, i, what)
    if cfg.answer_field is None:
        return
    answer = row[cfg.answer_field]
    ok = isinstance(answer, str) or (isinstance(answer, (int, float)) and not isinstance(answer, bool)
                                     and math.isfinite(answer))
    if not ok:
        what = "not a finite number" if isinstance(answer, float) else f"a {type(answer).__name__}"
        raise DataError(f"{row_origin(row, i)}: {cfg.answer_field!r} (data.answer_field) is {what} "
                        f"({_shown(answer)}); a gold answer is text or a number")
    if isinstance(answer, str):
        if not answer.strip():
            raise DataError(f"{row_origin(row, i)}: {cfg.answer_field!r} (data.answer_field) is empty: no completion "
                            f"could ever match it")
        _check_encodable(answer, row, i, f"{cfg.answer_field!r} (data.answer_field)")


def _check_encodable(text: str, row: dict[str, Any], i: int, what: str) -> None:
    """Raises DataError when ``text`` holds a lone surrogate (a JSON ``\\ud800`` escape without its pair)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DataError(f"{row_origin(row, i)}: {what} holds a lone surrogate {text[exc.start]!r} at character "
                        f"{exc.start + 1}, which is not text (a broken \\u escape?)") from None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
