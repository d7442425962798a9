"""Math verifier vs plain math-verify: accuracy on labelled answer pairs, and verifications per second.

    .venv/bin/python benchmarks/bench_math_verify.py            # writes benchmarks/results/math_verify.md
    .venv/bin/python benchmarks/bench_math_verify.py --repeat 1  # quicker

Accuracy: every labelled pair of ``tests/data/math_cases.jsonl`` and ``tests/data/math_cases_structured.jsonl``, and the
hand-labelled cases of ``tests/verifiers/test_verifiers_math_extra.py`` and ``tests/verifiers/test_verifiers_math_structured.py``.
"Plain math-verify" is math-verify with default settings:
``verify(parse(gold), parse(pred))``; a second row wraps the gold in ``$...$``, as trainers usually do. A call
that hangs (math-verify's own signal timeouts cannot interrupt a long sympy/GMP computation) is killed after
``--timeout`` seconds in a worker process and counted as wrong.

Speed, on the same inputs (the dev pairs repeated ``--repeat`` times, minus pairs on which math-verify hangs or
takes over 2 s):
plain math-verify sequentially in this process, our verifier sequentially in this process, and our
verifier through ``RewardFunction`` (process pool, ``--workers`` workers, hard per-call kill) with the result
cache off and on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import stamp  # noqa: E402
from rlvr.verifiers import verifier  # noqa: E402
from rlvr.verifiers.math_answer import math_equal  # noqa: E402
from rlvr.verifiers.pool import Call, Status, VerifierPool  # noqa: E402
from rlvr.verifiers.reward import RewardFunction, VerifierSpec  # noqa: E402

HACKING_CATEGORIES = {"units", "tiny_huge_numbers", "hedging", "extraction_response", "decimal_vs_exact",
                      "out_of_range", "truncated",
                      "plus_minus", "pathological", "multiple_choice"}


def _plain_math_verify(gold: str, pred: str, wrap_gold: bool) -> bool:
    from math_verify import parse, verify

    return bool(verify(parse(f"${gold}$" if wrap_gold else gold), parse(pred)))


@verifier("bench_plain_math_verify")
def plain_math_verify(completion: str, sample: dict, *, wrap_gold: bool = False) -> float:
    """math-verify 0.9 with default settings, as a verifier (used to run it under a hard kill)."""
    return float(_plain_math_verify(sample["answer"], completion, wrap_gold))


def _read_jsonl(name: str) -> list[dict]:
    path = ROOT / "tests" / "data" / name
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_cases() -> dict[str, list[dict]]:
    """Corpus name -> labelled pairs: ``dev``, ``extra`` and the newer kinds, ``structured`` and ``structured-extra``."""
    sys.path.insert(0, str(ROOT / "tests" / "verifiers"))
    import test_verifiers_math_structured as structured
    from test_verifiers_math_extra import CASES

    extra = [{"id": f"extra-{i}", "gold": g, "pred": p, "equal": e, "category": "extra"} for i, (g, p, e) in enumerate(CASES)]
    structured_lists = {
        "set_list": structured.LABELLED_PARTS + structured.GOLD_BOXES_IN_A_SENTENCE, "equation": structured.LABEL_EQUATIONS,
        "symbolic_expression": structured.RENAMED_CONSTANTS + structured.EULER, "multiple_choice": structured.CHOICE_WITH_TEXT,
        "extraction_response": structured.STATED_THEN_EXPLAINED + structured.ANSWER_TAG_THEN_BOX + [(g, p, False) for g, p in structured.UNCLOSED],
        "decimal_vs_exact": structured.DECIMALS,
    }
    structured_extra = [{"id": f"structured-extra-{category}-{i}", "gold": g, "pred": p, "equal": e, "category": category}
                for category, pairs in structured_lists.items() for i, (g, p, e) in enumerate(pairs)]
    return {"dev": _read_jsonl("math_cases.jsonl"), "extra": extra, "structured": _read_jsonl("math_cases_structured.jsonl"),
            "structured-extra": structured_extra, "range-cut-units": _read_jsonl("math_cases_range_cut_units.jsonl")}


def judge_all(cases: list[dict], target: str, timeout_s: float, kwargs: dict | None = None) -> list[tuple[bool | None, float]]:
    """Run ``target`` on every case in one worker (sequential, hard kill); returns (accepted, seconds)."""
    calls = [Call(target, c["pred"], {"answer": c["gold"], "finish_reason": c.get("finish_reason", "stop")}, kwargs or {},
                  timeout_s) for c in cases]
    with VerifierPool(num_workers=1, max_chunk=len(calls)) as pool:
        outcomes = pool.run(calls)
    out: list[tuple[bool | None, float]] = []
    for o in outcomes:
        if o.status is not Status.OK:
            out.append((None, o.seconds))
        else:
            value = o.value["score"] if isinstance(o.value, dict) else o.value
            out.append((value == 1.0, o.seconds))
    return out


def accuracy_row(name: str, cases: list[dict], judged: list[tuple[bool | None, float]]) -> dict:
    correct = sum((acc is True) == c["equal"] for c, (acc, _) in zip(cases, judged, strict=True))
    false_accept = sum(acc is True and not c["equal"] for c, (acc, _) in zip(cases, judged, strict=True))
    false_reject = sum(acc is not True and c["equal"] for c, (acc, _) in zip(cases, judged, strict=True))
    hack = sum(acc is True and not c["equal"] and c["category"] in HACKING_CATEGORIES
               for c, (acc, _) in zip(cases, judged, strict=True))
    hangs = sum(acc is None for acc, _ in judged)
    return {"name": name, "n": len(cases), "correct": correct, "accuracy": correct / len(cases),
            "false_accept": false_accept, "false_reject": false_reject, "hack_accept": hack, "hangs": hangs}


def throughput(cases: list[dict], repeat: int, workers: int, timeout_s: float) -> list[tuple[str, int, float, float]]:
    """``(checker, verifications, wall seconds, CPU seconds)`` for each checker on the same inputs.

    CPU seconds (this process plus its reaped workers) do not depend on what else runs on the machine;
    wall seconds do. Our parse caches are cleared before every run and the pool runs come first, so forked
    workers start as cold as the sequential runs."""
    inputs = [c for c in cases] * repeat
    completions = [c["pred"] for c in inputs]
    samples = [{"answer": c["gold"]} for c in inputs]
    rows = []
    for cache_size, label in ((0, "cache off"), (100_000, "cache on")):
        _clear_parse_caches()
        cpu0 = _cpu_seconds()
        with RewardFunction([VerifierSpec("math", timeout_s=timeout_s)], num_workers=workers, cache_size=cache_size) as fn:
            fn.score(["\\boxed{1}"] * workers, [{"answer": "1"}] * workers)  # start the workers outside the timing
            start = time.perf_counter()
            fn.score(completions, samples)
            seconds = time.perf_counter() - start
        rows.append((f"ours, RewardFunction, {workers} workers, hard kill, {label}", len(inputs), seconds,
                     _cpu_seconds() - cpu0))
    _clear_parse_caches()
    cpu0, start = _cpu_seconds(), time.perf_counter()
    for c in inputs:
        math_equal(c["gold"], c["pred"])
    rows.insert(0, ("ours, sequential, 1 process (no kill, no result cache)", len(inputs),
                    time.perf_counter() - start, _cpu_seconds() - cpu0))
    cpu0, start = _cpu_seconds(), time.perf_counter()
    for c in inputs:
        _plain_math_verify(c["gold"], c["pred"], False)
    rows.insert(0, ("plain math-verify, sequential, 1 process", len(inputs), time.perf_counter() - start,
                    _cpu_seconds() - cpu0))
    return rows


def _cpu_seconds() -> float:
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _clear_parse_caches() -> None:
    from rlvr.verifiers import math_parse

    math_parse._parse_top.cache_clear()
    math_parse._latex_to_sympy.cache_clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="times the dev pairs are repeated for the speed runs")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds before a hung check is killed")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "math_verify.md")
    args = parser.parse_args()

    corpora = load_cases()
    dev = corpora["dev"]
    rows = []
    misses: dict[str, list[str]] = {}
    for corpus, cases in corpora.items():
        plain = judge_all(cases, "bench_plain_math_verify", args.timeout)
        wrapped = judge_all(cases, "bench_plain_math_verify", args.timeout, {"wrap_gold": True})
        ours = judge_all(cases, "math", args.timeout, {"extraction": "lenient"})  # judging outside text, as rlvr verify
        rows += [(corpus, accuracy_row("plain math-verify (defaults)", cases, plain)),
                 (corpus, accuracy_row("plain math-verify, gold in $...$", cases, wrapped)),
                 (corpus, accuracy_row("ours (rlvr.verifiers.math_answer)", cases, ours))]
        misses[corpus] = [c["id"] for c, (acc, _) in zip(cases, ours, strict=True) if (acc is True) != c["equal"]]
        if corpus == "dev":
            hang_ids = {c["id"] for c, (acc, _) in zip(cases, plain, strict=True) if acc is None}
            slow_ids = {c["id"]: s for c, (_, s) in zip(cases, plain, strict=True) if s > 2.0}
            slowest_ours = max(s for _, s in ours)
    speed_cases = [c for c in dev if c["id"] not in hang_ids and c["id"] not in slow_ids]
    speed = throughput(speed_cases, args.repeat, args.workers, args.timeout)

    lines = ["# Math verifier vs plain math-verify", "",
             f"Measured {stamp()}, {os.cpu_count()} CPU cores; math-verify {_version('math-verify')}, "
             f"latex2sympy2_extended {_version('latex2sympy2_extended')}, sympy {_version('sympy')}. "
             f"Produced by `benchmarks/bench_math_verify.py --repeat {args.repeat} --workers {args.workers}`.", "",
             "## Accuracy on labelled answer pairs", "",
             "`dev`: `tests/data/math_cases.jsonl`; `extra`: the hand-labelled pairs in "
             "`tests/verifiers/test_verifiers_math_extra.py` (same categories, other strings); `structured`: "
             "`tests/data/math_cases_structured.jsonl` (the newer kinds: named parts, label equations, renamed constants, "
             "stated-then-explained answers, option text, rounding, unclosed boxes); `structured-extra`: the labelled pairs "
             "in `tests/verifiers/test_verifiers_math_structured.py` (those kinds, each with wrong-answer counterparts); "
             "`range-cut-units`: `tests/data/math_cases_range_cut_units.jsonl` (values beyond a double's range, "
             "completions cut at the length limit, money and compound units, scaled matrices, numbers in words). "
             "*Hack accepts*: wrong answers "
             f"accepted in the reward-hacking categories ({', '.join(sorted(HACKING_CATEGORIES))}). *Hangs*: killed "
             f"after {args.timeout:g} s (counted wrong).", "",
             "| corpus | checker | correct | accuracy | false accepts | false rejects | hack accepts | hangs |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for corpus, r in rows:
        lines.append(f"| {corpus} | {r['name']} | {r['correct']}/{r['n']} | {100 * r['accuracy']:.1f}% | "
                     f"{r['false_accept']} | {r['false_reject']} | {r['hack_accept']} | {r['hangs']} |")
    slow_text = ", ".join(f"{k} ({v:.1f} s)" for k, v in sorted(slow_ids.items())) or "none"
    lines += ["", f"Dev pairs that hang plain math-verify: {', '.join(sorted(hang_ids)) or 'none'}; that take it over 2 s: "
              f"{slow_text}. Our slowest dev pair took {slowest_ours:.2f} s. Our misses: "
              + "; ".join(f"{corpus}: {', '.join(ids) or 'none'}" for corpus, ids in misses.items()) + ".", "",
              "## Verifications per second", "",
              f"Inputs: the {len(speed_cases)} dev pairs that take plain math-verify under 2 s, repeated {args.repeat} "
              "times. With the cache on, repeats after the first are cache hits (as in GRPO, where the samples of one "
              "prompt often give the same answer).", "",
              f"Load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (the machine is "
              "shared), so wall-clock rates are noisy; CPU time per verification is not. *2-core rate* = "
              f"{args.workers} / CPU seconds per verification: what {args.workers} otherwise idle cores would give "
              "(a sequential checker uses one).", "",
              "| checker | verifications | wall s | verifications/s (wall) | CPU ms / verification | 2-core rate |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, n, seconds, cpu in speed:
        cores = args.workers if "RewardFunction" in name else 1
        lines.append(f"| {name} | {n} | {seconds:.2f} | {n / seconds:.0f} | {1000 * cpu / n:.1f} | "
                     f"{cores * n / cpu:.0f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


def _version(package: str) -> str:
    from importlib.metadata import version

    try:
        return version(package)
    except Exception:  # noqa: BLE001
        return "?"


if __name__ == "__main__":
    main()
