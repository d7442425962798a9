"""``rlvr verify``: score answers or completions with a verifier from the command line; JSON out.

    rlvr verify math --gold '\\frac{1}{2}' --pred 'so the answer is \\boxed{0.5}'   # one JSON object
    rlvr verify math --file cases.jsonl      # lines with "gold" and "pred"
    rlvr verify format --file f.jsonl        # lines with "completion"
    rlvr verify code --file c.jsonl          # the line format: docs/sandbox.md ("rlvr verify code")

With ``--file`` every input line gives one output line, in order: the input fields plus ``"score"`` (1 or 0;
null when the line could not be judged: a timeout, a crash, a bad line, or a gold that cannot be parsed).
Checks run in a process pool (``--workers``) with a hard per-check time limit (``--timeout``); a progress
bar goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

_BATCH_LINES = 2000


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``verify`` subcommand (kinds ``math``, ``format``, ``code``) to an argparse subparsers object."""
    parser = subparsers.add_parser("verify", help="score answers or completions with a verifier (JSON out)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="{math,format,code}")

    math = kinds.add_parser("math", help="is the final answer of --pred equal to --gold?")
    math.add_argument("--gold", help="reference answer (or a full reference solution)")
    math.add_argument("--pred", help="model response or answer")
    math.add_argument("--extraction", choices=["lenient", "marked"], default="lenient",
                      help="lenient (default): the last sentence with math counts when no marker does; marked: only "
                           "a \\boxed{}, a closed <answer> block or 'the answer is' (the training default)")
    math.add_argument("--truncated", action="store_true",
                      help="--pred was cut at the length limit (a file row says so with \"finish_reason\": \"length\")")
    _add_common(math, "JSONL with fields 'gold' and 'pred'")

    fmt = kinds.add_parser("format", help="R1 <think>..</think><answer>..</answer> layout")
    fmt.add_argument("--completion", help="one completion to check")
    fmt.add_argument("--prefilled-think", action="store_true",
                     help="the chat template put <think> in the prompt; the completion need not open it")
    fmt.add_argument("--think-tag", default="think")
    fmt.add_argument("--answer-tag", default="answer")
    _add_common(fmt, "JSONL with field 'completion'")

    code = kinds.add_parser("code", help="run programs against tests in the sandbox (input format: docs/sandbox.md)",
                            description="Run each line's program against its tests in the sandbox. A line: "
                                        "'solution', 'test_type' (stdio or function) and 'tests', optionally "
                                        "'checker' and 'limits'; the format with examples is in docs/sandbox.md.")
    code.add_argument("--file", required=True, help="JSONL with 'solution', 'test_type' and 'tests' (docs/sandbox.md)")
    code.add_argument("--backend", default="auto", help="sandbox backend: auto, docker or bwrap")
    code.add_argument("--mode", choices=["fraction", "all"], default="fraction",
                      help="score: fraction of tests passed, or 1/0 for all passed")
    parser.set_defaults(func=run)
    return parser


def _add_common(parser: argparse.ArgumentParser, file_help: str) -> None:
    parser.add_argument("--file", type=Path, help=file_help)
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per check before it is killed")
    parser.add_argument("--explain", action="store_true", help="also print the verifier's extra fields")


def run(args: argparse.Namespace) -> int:
    """Run ``rlvr verify``; returns the exit code (0 ok, 2 bad usage)."""
    if args.kind == "code":
        from rlvr.commands.verify_code import run as run_code
        return int(run_code(args) or 0)
    if args.workers < 1 or not args.timeout > 0:
        print("error: --workers must be >= 1 and --timeout > 0 seconds", file=sys.stderr)
        return 2
    if args.kind == "math":
        single = {"gold": args.gold, "pred": args.pred} if args.file is None else None
        if single is not None and args.truncated:
            single["finish_reason"] = "length"
        if args.file is None and (args.gold is None or args.pred is None):
            print("error: give --gold and --pred, or --file", file=sys.stderr)
            return 2
    else:
        single = {"completion": args.completion} if args.file is None else None
        if args.file is None and args.completion is None:
            print("error: give --completion or --file", file=sys.stderr)
            return 2
    if args.file is not None and not args.file.is_file():
        print(f"error: no such file: {args.file}", file=sys.stderr)
        return 2
    from rlvr.verifiers.reward import RewardFunction

    spec = _spec(args)
    with RewardFunction([spec], num_workers=args.workers, failure_score=None) as reward_fn:
        if single is not None:
            row = _score_rows([single], reward_fn, args, explain=True)[0]
            print(json.dumps(row, ensure_ascii=False))
            return 0
        with args.file.open(encoding="utf-8") as f:
            _score_file(f, reward_fn, args, sys.stdout)
    return 0


def _spec(args: argparse.Namespace) -> Any:
    from rlvr.verifiers.reward import VerifierSpec

    if args.kind == "math":
        return VerifierSpec("math", kwargs={"extraction": args.extraction}, timeout_s=args.timeout)
    kwargs = {"think_tag": args.think_tag, "answer_tag": args.answer_tag,
              "prefilled_think": True if args.prefilled_think else None}
    return VerifierSpec("format", kwargs=kwargs, timeout_s=args.timeout)


def _score_file(f: TextIO, reward_fn: Any, args: argparse.Namespace, out: TextIO) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    lines = f.readlines()
    columns = (TextColumn(f"verify {args.kind}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True)) as progress:
        task = progress.add_task("verify", total=len(lines))
        for start in range(0, len(lines), _BATCH_LINES):
            chunk = list(_parse_lines(lines[start : start + _BATCH_LINES], start))

            def advance(done: int, total: int, base: int = start) -> None:
                progress.update(task, completed=base + done)

            for row in _score_rows(chunk, reward_fn, args, explain=args.explain, on_progress=advance):
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
            out.flush()
        progress.update(task, completed=len(lines))


def _parse_lines(lines: list[str], first_index: int) -> Iterator[dict[str, Any]]:
    for i, line in enumerate(lines, start=first_index + 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            yield {"_error": f"line {i}: not JSON ({exc.msg})", "line": i}
            continue
        yield row if isinstance(row, dict) else {"_error": f"line {i}: expected a JSON object", "line": i}


def _score_rows(rows: list[dict[str, Any]], reward_fn: Any, args: argparse.Namespace, *, explain: bool,
                on_progress: Any = None) -> list[dict[str, Any]]:
    needed = ("gold", "pred") if args.kind == "math" else ("completion",)
    completions: list[str] = []
    samples: list[dict[str, Any]] = []
    index: list[int] = []  # position in `rows` of each scored row
    out: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        error = row.pop("_error", None)
        missing = [k for k in needed if not isinstance(row.get(k), (str, int, float)) or isinstance(row.get(k), bool)]
        if error is None and missing:
            error = f"missing or non-text field(s): {', '.join(missing)}"
        out.append({**row, "score": None})
        if error is not None:
            out[-1]["error"] = error
            continue
        if args.kind == "math":
            completions.append(str(row["pred"]))
            samples.append({"answer": row["gold"], "finish_reason": row.get("finish_reason", "stop")})
        else:
            completions.append(str(row["completion"]))
            samples.append({"prompt": str(row.get("prompt", ""))})
        index.append(i)
    results = reward_fn.score(completions, samples, on_progress=on_progress) if completions else []
    label = reward_fn.labels[0]
    for i, result in zip(index, results, strict=True):
        score = result.scores[label]
        out[i]["score"] = None if score is None else int(round(score)) if score in (0.0, 1.0) else score
        if label in result.failures:
            out[i]["error"] = result.failures[label]
        if explain:
            out[i].update({k.split("/", 1)[1]: v for k, v in result.extras.items()})
    return out
