"""A judge model against the math verifier on the repository's labelled math cases (tests/data/math_cases*.jsonl):
how often each agrees with the label, how often they agree with each other, how often the judge accepts a wrong
answer, and how often it gives no readable verdict at all.

    .venv/bin/python benchmarks/bench_judge.py                        # the embedded model via rlvr judge serve
    .venv/bin/python benchmarks/bench_judge.py --url http://host:8000/v1 --model Qwen/Qwen2.5-7B-Instruct

Each case is a (gold, prediction, equal) triple without a question, so the judge is asked the equivalence question
directly (``TEMPLATE``); the math verifier reads the prediction as `rlvr verify math` does (lenient extraction).
Verdicts: ``yes_no_logprob`` on every case (accepted when P(yes) >= 0.5), and ``score_line`` (0-10, accepted at
>= 5) on the first ``--score-line-cases``. Writes benchmarks/results/judge_vs_math.md (date, commit, CPU).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import stamp  # noqa: E402

TEMPLATE = ("Reference answer: {gold}\nCandidate answer: {response}\n\n"
            "Is the candidate answer mathematically the same answer as the reference answer?")


def load_cases() -> list[dict]:
    """Every labelled case of tests/data/math_cases*.jsonl, files in name order."""
    rows = []
    for path in sorted((ROOT / "tests" / "data").glob("math_cases*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rows.append(json.loads(line))
    return rows


def judge_all(url: str, model: str, cases: list[dict], verdict: str) -> tuple[list, float]:
    from rlvr.verifiers.judge import judge_rewards_batch

    ask = {"yes_no_logprob": " Answer with one word: yes or no.",
           "score_line": ' End your reply with one line "Score: N", N from {low} (different) to {high} (same).'}[verdict]
    start = time.monotonic()
    out = judge_rewards_batch([str(c["pred"]) for c in cases], [{"answer": str(c["gold"])} for c in cases],
                              url=url, model=model, template=TEMPLATE + ask, verdict=verdict, max_tokens=96,
                              concurrency=16, request_timeout_s=600, retries=1)
    return out, time.monotonic() - start


def rates(cases: list[dict], judged: list, math_equal: list[bool]) -> dict[str, str]:
    scored = [(c, j, m) for c, j, m in zip(cases, judged, math_equal, strict=True) if isinstance(j, dict)]
    n, failed = len(cases), len(cases) - len(scored)
    accepted = [(c, j["score"] >= 0.5, m) for c, j, m in scored]
    wrong = [a for c, a, _ in accepted if not c["equal"]]
    right = [a for c, a, _ in accepted if c["equal"]]

    def pct(k: float, d: int) -> str:
        return f"{100 * k / d:.1f}% ({int(k)}/{d})" if d else "n/a"

    return {"cases": str(n), "no verdict (failure)": pct(failed, n),
            "judge = label": pct(sum(a == c["equal"] for c, a, _ in accepted), len(accepted)),
            "judge = math verifier": pct(sum(a == m for _, a, m in accepted), len(accepted)),
            "judge accepts a wrong answer": pct(sum(wrong), len(wrong)),
            "judge rejects a right answer": pct(len(right) - sum(right), len(right)),
            "mean score, right / wrong answers": (
                f"{sum(j['score'] for c, j, _ in scored if c['equal']) / len(right):.3f} / "
                f"{sum(j['score'] for c, j, _ in scored if not c['equal']) / len(wrong):.3f}"
                if right and wrong else "n/a")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="an OpenAI-compatible base URL (default: serve --model here)")
    parser.add_argument("--model", default="embedded:smollm2-135m-instruct")
    parser.add_argument("--score-line-cases", type=int, default=60)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "judge_vs_math.md"))
    args = parser.parse_args()
    from rlvr.verifiers.math_answer import judge_math

    line = stamp()
    url = args.url
    if url is None:
        from rlvr.serving.chat_model import ChatModel
        from rlvr.serving.chat_server import ChatServer

        server = ChatServer("127.0.0.1", 0, ChatModel(args.model, max_batch=16), args.model)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    cases = load_cases()
    math_equal = [judge_math(c["gold"], c["pred"]).equal is True for c in cases]
    math_right = sum(m == c["equal"] for c, m in zip(cases, math_equal, strict=True))
    yes_no, yes_no_s = judge_all(url, args.model, cases, "yes_no_logprob")
    subset = cases[:args.score_line_cases]
    scored, scored_s = judge_all(url, args.model, subset, "score_line")
    table = {"yes/no log-prob (all cases)": rates(cases, yes_no, math_equal),
             f"Score line 0-10 (first {len(subset)})": rates(subset, scored, math_equal[:len(subset)])}
    rows = list(next(iter(table.values())))
    lines = ["# A judge model against the math verifier on the labelled math cases\n",
             f"Written by `python benchmarks/bench_judge.py` on {line}. Judge: `{args.model}` "
             f"{'served here by rlvr judge serve' if args.url is None else 'at ' + args.url}, greedy. "
             f"The math verifier agrees with the label on {math_right}/{len(cases)} cases "
             f"({100 * math_right / len(cases):.1f}%).\n",
             "| | " + " | ".join(table) + " |", "| --- |" + " ---: |" * len(table)]
    for row in rows:
        lines.append(f"| {row} | " + " | ".join(t[row] for t in table.values()) + " |")
    lines.append(f"\nWall time: yes/no {yes_no_s:.0f} s for {len(cases)} cases, Score line {scored_s:.0f} s for "
                 f"{len(subset)} (16 requests in flight, batched by the server).")
    failures = [j for j in scored if not isinstance(j, dict)][:3]
    if failures:
        lines.append("\nExamples of Score-line failures (the raw reply is kept in the failure):\n")
        lines += [f"- `{str(f)[:300]}`" for f in failures]
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
