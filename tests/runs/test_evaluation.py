"""Held-out evaluation's summary: pass@1, pass@k and maj@k by hand, and samples that failed for the machinery."""
import math

import pytest

from rlvr.runs.evaluation import pass_at_k, summarize


def _rows(*prompts):
    """Per prompt a list of (correct, answer) pairs -> summarize's keyword lists (reward = correct, length 10)."""
    return dict(correct=[[c for c, _ in p] for p in prompts], answers=[[a for _, a in p] for p in prompts],
                rewards=[[float(c) for c, _ in p] for p in prompts], lengths=[[10] * len(p) for p in prompts],
                truncated=[[False] * len(p) for p in prompts])


def test_summary_by_hand():
    res = summarize(**_rows([(True, "4"), (False, "5"), (True, "4")], [(False, "1"), (False, "2"), (False, "2")]))
    assert (res.num_prompts, res.k) == (2, 3)
    assert res.pass_at_1 == pytest.approx((2 / 3 + 0) / 2)
    assert res.pass_at_1_se == pytest.approx(math.sqrt(((2 / 3 - 1 / 3) ** 2 * 2) / 1 / 2))
    assert res.pass_at_k == pytest.approx(0.5) and res.maj_at_k == pytest.approx(0.5)
    assert res.infra_failures == 0


def test_a_sample_without_a_verdict_is_left_out_not_counted_unsolved():
    """Prompt 0: 2 of its 3 samples scored (1 right); prompt 1: none scored, so it is left out of every rate."""
    rows = _rows([(True, "4"), (False, "9"), (False, "5")], [(False, "1"), (False, "1"), (False, "1")])
    scored = [[True, False, True], [False, False, False]]
    res = summarize(**rows, scored=scored)
    assert res.num_prompts == 1 and res.infra_failures == 4
    assert res.pass_at_1 == pytest.approx(0.5)  # 1 of the 2 scored, not 1 of 3
    assert res.pass_at_k == pytest.approx(pass_at_k(2, 1, 2)) == 1.0
    assert res.mean_reward == pytest.approx(0.5)
    assert res.mean_length == 10.0  # lengths count every sample
    with pytest.raises(ValueError, match="no sample could be scored \\(6 failures of the machinery\\)"):
        summarize(**rows, scored=[[False] * 3] * 2)
    assert summarize(**rows, scored=[[True] * 3] * 2) == summarize(**rows)


def test_tool_use_by_hand():
    from rlvr.runs.evaluation import tool_use

    use = tool_use([(0, 0, 1), (2, 1, 3), (1, 1, 2), (1, 0, 2)])
    assert use == {"fraction_of_samples_calling": 0.75, "calls_per_sample": 1.0, "error_rate": 0.5,
                   "turns_per_sample": 2.0}
    assert tool_use([(0, 0, 1)])["error_rate"] == 0.0
    with pytest.raises(ValueError, match="at least one sample"):
        tool_use([])


class _PerPromptEngine:
    """Held-out prompt "p0" answers at once; "p1" calls ``add`` with 1 and 2 (ok), "p2" with 2 and 2 (an error:
    equal operands); after an output block a sample answers and stops."""

    def __init__(self, tokenizer):
        self.tok = tokenizer

    def generate(self, prompt_token_ids, n, sampling):
        from rlvr.rollout.base import Completion

        groups = []
        for ids in prompt_token_ids:
            text = self.tok.decode(ids, skip_special_tokens=False)
            operands = {"p1": (1, 2), "p2": (2, 2)}.get(next(q for q in ("p0", "p1", "p2") if q in text))
            if operands and "```output" not in text.rsplit("<|im_start|>assistant", 1)[1]:
                out, reason, hit = '```add\n{{"a": {}, "b": {}}}\n```\n'.format(*operands), "stop_sequence", "\n```\n"
            else:
                out, reason, hit = "done", "stop", None
            out_ids = self.tok(out, add_special_tokens=False)["input_ids"] + ([self.tok.eos_token_id] if hit is None
                                                                              else [])
            groups.append([Completion(out_ids, [-1.0] * len(out_ids), reason, hit) for _ in range(n)])
        return groups


class _AllSolved:
    def score(self, texts, samples):
        from types import SimpleNamespace

        return [SimpleNamespace(scores={"ok": 1.0}, total=1.0, failures={}) for _ in texts]


def test_held_out_evaluation_with_tools_reports_tool_use():
    from rlvr.config.schema import Recipe
    from rlvr.data.prompts import Prompt
    from rlvr.rollout.tool_sampler import build_tool_sampler
    from rlvr.runs.evaluation import run_eval
    from tests.tools.scripted import chat_tokenizer

    tok = chat_tokenizer()
    engine = _PerPromptEngine(tok)
    recipe = Recipe(rollout={"tools": [{"name": "tests.tools.scripted:add"}], "call_format": "fenced", "max_turns": 3,
                             "max_new_tokens": 64},
                    data={"source": {"type": "jsonl", "path": "rows.jsonl"}, "template": "chat"},
                    verifiers=[{"name": "math"}])
    sampler = build_tool_sampler(engine, tok, recipe, [], [tok.eos_token_id])
    prompts = [Prompt(i, {"question": f"p{i}", "answer": "1"}, f"p{i}", []) for i in range(3)]
    res = run_eval(engine, tok, prompts, _AllSolved(), "ok", k=2, temperature=1.0, max_new_tokens=64, tools=sampler)
    # 6 samples: p0's 2 answer in 1 turn; p1's and p2's 4 call once (p2's 2 calls fail) and answer in turn 2
    assert res.tools == {"fraction_of_samples_calling": 4 / 6, "calls_per_sample": 4 / 6, "error_rate": 0.5,
                         "turns_per_sample": 10 / 6}
    flat = res.as_dict()
    assert flat["tools/error_rate"] == 0.5 and "tools" not in flat and flat["pass_at_1"] == 1.0
    assert "tools/error_rate" not in summarize(**_rows([(True, "1")])).as_dict()
