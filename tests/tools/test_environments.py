"""Environments from a recipe: loading by import path (errors name the path, kwargs reach the constructor), the
sample's row reaching ``reset`` and the tools without its gold (and with it when the recipe allows), episode rewards in
the reward sum with their weight, an environment that raises costing only the samples it was answering, and the
number-guessing example played by a scripted binary search."""

from __future__ import annotations

import contextlib
import io
import re
import traceback

import pytest
import torch
from pydantic import ValidationError

from rlvr.config import RecipeError, resolve
from rlvr.config.schema import Recipe
from rlvr.data.prompts import Prompt
from rlvr.import_paths import ImportPathError
from rlvr.rollout.base import Completion, SamplingParams
from rlvr.rollout.multi_turn import multi_turn_generate
from rlvr.rollout.tool_sampler import build_tool_sampler, gold_fields
from rlvr.tools import Environment, FunctionTool, PythonTool, Reply, ToolEnvironment, ToolsConfig, choose_format
from rlvr.tools.environment import Episode, EpisodeReward
from rlvr.tools.envs.number_guessing import NumberGuessing
from rlvr.tools.loading import EnvironmentLoadError, build_environment
from rlvr.trainer.batch import RolloutBatch
from rlvr.trainer.reward_sources import VerifierRewards
from rlvr.verifiers.reward import RewardResult
from tests.tools.scripted import ScriptedEngine, chat_tokenizer

HERE = "tests.tools.test_environments"


class Recorder(Environment):
    """Records the rows its ``reset`` gets; the first turn ends the episode with ``reward`` (None: no reward)."""

    def __init__(self, greeting: str, reward: float | None = None, tokenizer=None) -> None:
        self.greeting, self.reward, self.tokenizer, self.rows = greeting, reward, tokenizer, []

    def reset(self, row):
        self.rows.append(row)
        return [{"role": "user", "content": f"{self.greeting} {row.get('question', '')}"}]

    def step(self, episode, assistant_message):
        return Reply(done=True, reward=self.reward)


class Fragile(Environment):
    """A row whose ``case`` is ``reset`` breaks ``reset``; ``step`` breaks ``step``; else reward 1 at the first turn."""

    def reset(self, row):
        if row["case"] == "reset":
            raise RuntimeError("no board for this row")
        return [{"role": "user", "content": row["case"]}]

    def step(self, episode, assistant_message):
        if episode.row["case"] == "step":
            raise ZeroDivisionError("division by zero")
        return Reply(done=True, reward=1.0)


class ToolGame(ToolEnvironment):
    """An environment that owns the recipe's tools, built with them and its own ``bonus``."""

    def __init__(self, tools, call_format, tokenizer, max_tool_output_tokens=256, bonus: float = 0.0) -> None:
        super().__init__(tools, call_format, tokenizer, max_tool_output_tokens)
        self.bonus = bonus


def lookup(key: str, row: dict) -> str:
    """Look ``key`` up in the calling sample's row."""
    return str(row.get(key, "missing"))


class BinarySearchPlayer:
    """A rollout engine that plays the guessing game by binary search: it reads the range from the last question of
    the conversation and narrows it by every "higher/lower than X" reply since, then writes the middle number and eos."""

    def __init__(self, tokenizer) -> None:
        self.tok, self.calls = tokenizer, 0

    def generate(self, prompt_token_ids, n, sampling: SamplingParams):
        self.calls += 1
        groups = []
        for ids in prompt_token_ids:
            text = self.tok.decode(ids, skip_special_tokens=False)
            low, high = map(int, re.findall(r"from (\d+) to (\d+)", text)[-1])
            for word, x in re.findall(r"(higher|lower) than (\d+)", text):
                low, high = (max(low, int(x) + 1), high) if word == "higher" else (low, min(high, int(x) - 1))
            out = self.tok(str((low + high) // 2), add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
            groups.append([Completion(list(out), [-0.5] * len(out), "stop") for _ in range(n)])
        return groups


def _recipe(**rollout) -> Recipe:
    return Recipe(data={"source": {"type": "jsonl", "path": "games.jsonl"}, "template": "chat"},
                  rollout={"max_new_tokens": 32, "max_turns": 4, **rollout})


def _prompt(i: int, row: dict) -> Prompt:
    return Prompt(i, row, row.get("question", ""), [])


# ------------------------------------------------------------------------------------------------ loading
def test_an_environment_is_built_from_its_import_path_with_its_kwargs_and_the_tokenizer():
    tok = chat_tokenizer()
    env = build_environment(ToolsConfig(environment=f"{HERE}:Recorder", environment_kwargs={"greeting": "hi",
                                                                                              "reward": 0.5}), tok)
    assert isinstance(env, Recorder) and (env.greeting, env.reward) == ("hi", 0.5) and env.tokenizer is tok
    assert build_environment(ToolsConfig(), tok) is None  # neither tools nor environment: single-turn
    game = build_environment(ToolsConfig(environment="rlvr.tools.envs.number_guessing:NumberGuessing",
                                         environment_kwargs={"max_guesses": 6}), tok)
    assert isinstance(game, NumberGuessing) and game.max_guesses == 6


@pytest.mark.parametrize("path, kwargs, error, message", [
    ("no_such_module_xyz:Game", {}, ImportPathError,
     "environment path 'no_such_module_xyz:Game': cannot import module 'no_such_module_xyz' (No module named "
     "'no_such_module_xyz')"),
    ("rlvr.tools.envs.number_guessing:NumberGuesing", {}, ImportPathError,
     "environment path 'rlvr.tools.envs.number_guessing:NumberGuesing': module 'rlvr.tools.envs.number_guessing' has "
     "no 'NumberGuesing'. Did you mean 'NumberGuessing'?"),
    ("rlvr.tools.envs.number_guessing:last_number", {}, ImportPathError,
     "environment path 'rlvr.tools.envs.number_guessing:last_number' names a function, expected a class"),
    ("rlvr.tools.calls:ToolCall", {}, EnvironmentLoadError,
     "rollout.environment 'rlvr.tools.calls:ToolCall' is not a subclass of rlvr.tools.Environment"),
    ("rlvr.tools.envs.number_guessing:NumberGuessing", {"max_guess": 3}, EnvironmentLoadError,
     "rollout.environment 'rlvr.tools.envs.number_guessing:NumberGuessing': environment_kwargs has 'max_guess', which "
     "its constructor does not take. Did you mean 'max_guesses'? Its keyword arguments: max_guesses, secret_field"),
    (f"{HERE}:Recorder", {}, EnvironmentLoadError,
     f"rollout.environment '{HERE}:Recorder': environment_kwargs lacks the required argument(s) greeting"),
    ("rlvr.tools.envs.number_guessing:NumberGuessing", {"max_guesses": 0}, EnvironmentLoadError,
     "rollout.environment 'rlvr.tools.envs.number_guessing:NumberGuessing': building it with {'max_guesses': 0} raised "
     "ValueError: max_guesses must be >= 1, got 0"),
])
def test_a_bad_environment_is_one_error_naming_it(path, kwargs, error, message):
    with pytest.raises(error) as info:
        build_environment(ToolsConfig(environment=path, environment_kwargs=kwargs), chat_tokenizer())
    assert str(info.value) == message


def test_tools_go_to_an_environment_that_owns_them_and_are_refused_by_any_other():
    tok = chat_tokenizer()
    cfg = ToolsConfig(tools=[{"name": "tests.tools.scripted:add"}], call_format="fenced", max_tool_output_tokens=16,
                      environment=f"{HERE}:ToolGame", environment_kwargs={"bonus": 0.5})
    env = build_environment(cfg, tok)
    assert isinstance(env, ToolGame) and list(env.tools) == ["add"] and env.bonus == 0.5
    assert env.format.name == "fenced" and env.max_tool_output_tokens == 16
    with pytest.raises(EnvironmentLoadError, match=r"^rollout.environment 'rlvr.tools.envs.number_guessing:"
                                                   r"NumberGuessing' is not a rlvr.tools.ToolEnvironment subclass, so "
                                                   r"it cannot run rollout.tools \(tests.tools.scripted:add\)"):
        build_environment(cfg.model_copy(update={"environment": "rlvr.tools.envs.number_guessing:NumberGuessing",
                                                 "environment_kwargs": {}}), tok)


def test_the_recipe_keys_validate_without_importing_anything():
    with pytest.raises(ValidationError, match="expected 'package.module:ClassName'"):
        ToolsConfig(environment="NumberGuessing")
    with pytest.raises(ValidationError, match="environment_kwargs is set but rollout.environment is not"):
        ToolsConfig(environment_kwargs={"max_guesses": 4})
    with pytest.raises(ValidationError, match="environment_reward_weight is set but rollout.environment is not"):
        ToolsConfig(environment_reward_weight=2.0)
    # an environment rewards the episodes: no verifier is needed, and its reward says what is solved
    assert _recipe(environment=f"{HERE}:Recorder").solved_verifier == "env"
    with pytest.raises(RecipeError, match=r"reward.solved_verifier='env' names the environment's reward, but there "
                                          r"is no rollout.environment"):
        resolve({"data": {"source": {"type": "jsonl", "path": "x.jsonl"}}, "verifiers": [{"name": "math"}],
                 "reward": {"solved_verifier": "env"}})
    with pytest.raises(RecipeError, match="no verifiers and reward.source='verifiers': nothing scores"):
        resolve({"data": {"source": {"type": "jsonl", "path": "x.jsonl"}}})


# ------------------------------------------------------------------------------------------------ the row and its gold
def test_gold_fields_are_the_answer_the_worked_solution_a_verifiers_answer_field_and_code_tests():
    recipe = Recipe(data={"source": {"type": "jsonl", "path": "x.jsonl"}, "answer_field": "answer",
                          "shot_field": "solution"},
                    verifiers=[{"name": "math", "kwargs": {"answer_field": "final"}}, {"name": "code"}])
    assert gold_fields(recipe) == {"answer", "solution", "final", "tests"}


@pytest.mark.parametrize("sees_gold", [False, True])
def test_reset_gets_the_row_without_its_gold_unless_the_recipe_allows_it(sees_gold):
    tok = chat_tokenizer()
    recipe = _recipe(environment=f"{HERE}:Recorder", environment_kwargs={"greeting": "hi"},
                     environment_sees_gold=sees_gold)
    sampler = build_tool_sampler(ScriptedEngine(tok, [("7", True)]), tok, recipe, [], [tok.eos_token_id])
    rows = [{"question": "guess", "low": 1, "answer": 5}, {"question": "again", "low": 2, "answer": 6}]
    out = sampler.generate([_prompt(3, rows[0]), _prompt(4, rows[1])], 2, SamplingParams(max_new_tokens=8))
    seen = sampler.env.rows
    assert [r["prompt_index"] for r in seen] == [3, 4] and [r["low"] for r in seen] == [1, 2]
    assert [("answer" in r) for r in seen] == [sees_gold, sees_gold]
    assert seen[0]["messages"] == [{"role": "user", "content": "guess"}]  # the rendered conversation
    assert out.prompts[0].text.startswith("<|im_start|>user\nhi guess")  # the ids the environment's reset gave


def test_a_function_tool_with_a_row_parameter_gets_its_samples_row_and_the_model_cannot_set_it():
    tok = chat_tokenizer()
    tool = FunctionTool(lookup)
    assert tool.wants_row and "row" not in tool.schema["function"]["parameters"]["properties"]
    env = ToolEnvironment([tool], choose_format("fenced", None), tok)
    episodes = [Episode({"colour": "red"}, []), Episode({"colour": "blue"}, []), Episode({"colour": "x"}, [])]
    calls = ['```lookup\n{"key": "colour"}\n```\n', '```lookup\n{"key": "colour"}\n```\n',
             '```lookup\n{"key": "colour", "row": {"colour": "forged"}}\n```\n']
    replies = env.step_many(episodes, calls, [True, True, True])
    assert [r.calls[0].output for r in replies[:2]] == ["red", "blue"]
    assert replies[2].calls[0].status == "malformed" and "unexpected argument 'row'" in replies[2].calls[0].output
    with pytest.raises(ValueError, match="kwargs cannot set 'row'"):
        FunctionTool(lookup, kwargs={"row": {}})


@pytest.mark.parametrize("session", [False, True])
def test_the_python_tools_row_variable_binds_the_row_before_the_code_and_keeps_its_line_numbers(session):
    code = "print(ROW['table'][1])\nraise ValueError('line two')\n"
    program = PythonTool(row_variable="ROW", session=session).program(code, {"cells": ["x = 1"]}, {"table": [3, 4]})
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(ValueError) as info:
        exec(compile(program, "<program>", "exec"), {})  # noqa: S102 - the program the sandbox would run
    assert out.getvalue() == "4\n"
    frame = traceback.extract_tb(info.value.__traceback__)[-1]
    assert (frame.filename, frame.lineno) == ("<cell>", 2)
    assert PythonTool().program(code, {}, {"table": [3, 4]}) == code  # no row_variable: the code as written
    with pytest.raises(ValueError, match="row_variable='1x' is not a Python name"):
        PythonTool(row_variable="1x")


# ------------------------------------------------------------------------------------------------ rewards
class _Verifier:
    """Stands in for the verifier pool: every completion scores 0.5 on ``v``."""

    def score(self, texts, samples):
        return [RewardResult(total=0.5, scores={"v": 0.5}, extras={}, failures={}) for _ in texts]


def _batch(episodes: list[EpisodeReward]) -> RolloutBatch:
    n = len(episodes)
    return RolloutBatch(prompts=[Prompt(0, {}, "p", [1])], completions=[Completion([2], [-1.0], "stop")] * n,
                        group_size=n, texts=["x"] * n, episode_rewards=episodes)


EPISODES = [EpisodeReward(1.0), EpisodeReward(0.0), EpisodeReward(None), EpisodeReward(error="step raised KeyError")]


def test_an_episode_reward_enters_the_sum_with_its_weight_and_a_failed_environment_leaves_its_sample_out():
    rewards = VerifierRewards(_Verifier(), ["v", "env"], "env", drop_failed=True, environment_weight=2.0)
    s = rewards.score(_batch(EPISODES), [{}] * 4)
    assert s.rewards.tolist() == [2.5, 0.5, 0.5, 0.5]  # 0.5 + 2.0 x (1, 0, none, failed: nothing)
    assert s.valid.tolist() == [True, True, True, False] and s.solved.tolist() == [True, False, False, False]
    assert [r.scores["env"] for r in s.results] == [1.0, 0.0, None, None]
    assert s.results[3].failures == {"env": "error: step raised KeyError"}
    # reward.failure_score set: the failure scores that (x the weight) and the sample stays in
    kept = VerifierRewards(_Verifier(), ["v", "env"], "env", drop_failed=False, environment_weight=2.0,
                           failure_score=-1.0).score(_batch(EPISODES), [{}] * 4)
    assert kept.rewards.tolist() == [2.5, 0.5, 0.5, -1.5] and kept.valid.all()


def test_the_step_logs_the_environments_reward_and_counts_its_failures():
    from rlvr.trainer.step_metrics import rollout_metrics

    batch = _batch(EPISODES)
    s = VerifierRewards(_Verifier(), ["v", "env"], "env", drop_failed=True, environment_weight=1.0).score(batch, [{}] * 4)
    batch.reward_results, batch.rewards, batch.solved, batch.valid = s.results, s.rewards, s.solved, s.valid
    m = rollout_metrics(batch, ["v", "env"], 1.0, 4)
    assert m["reward/env"] == 0.5 and m["reward/infra_failures/env"] == 1.0 and m["reward/left_out"] == 1.0
    assert m["reward/mean"] == pytest.approx((1.5 + 0.5 + 0.5) / 3)  # over the 3 samples left in


def test_an_environment_that_raises_costs_only_the_samples_it_was_answering():
    tok = chat_tokenizer()
    engine = ScriptedEngine(tok, [("ok", True)])
    rows = [{"case": "fine"}, {"case": "step"}, {"case": "reset"}]
    out = multi_turn_generate(engine, tok, Fragile(), rows, 2, SamplingParams(max_new_tokens=8), max_turns=3,
                              eos_ids=[tok.eos_token_id])
    got = [[s.episode_reward for s in g] for g in out.groups]
    assert got[0] == [EpisodeReward(1.0)] * 2
    assert got[1] == [EpisodeReward(error="the environment's step raised ZeroDivisionError: division by zero")] * 2
    assert got[2] == [EpisodeReward(error="the environment's reset raised RuntimeError: no board for this row")] * 2
    assert len(engine.calls[0][0]) == 2  # the row whose reset failed was never generated
    assert [len(s.token_ids) for s in out.groups[2]] == [0, 0] and [len(s.turns) for s in out.groups[0]] == [1, 1]
    # through the reward source: the two scored samples train, the four failed ones are left out
    batch = _batch([s.episode_reward for g in out.groups for s in g])
    s = VerifierRewards(_Verifier(), ["v", "env"], "env", drop_failed=True, environment_weight=1.0).score(batch, [{}] * 6)
    assert s.valid.tolist() == [True, True, False, False, False, False]
    assert s.rewards[:2].tolist() == [1.5, 1.5]


class _BrokenRound(Environment):
    def step_many(self, episodes, assistant_messages, ended_by_stop):
        raise OSError("the game server is down")


class _EarlyReward(Environment):
    def step(self, episode, assistant_message):
        return Reply(messages=[{"role": "user", "content": "go on"}], reward=1.0)


class _NanReward(Environment):
    def step(self, episode, assistant_message):
        return Reply(done=True, reward=float("nan"))


@pytest.mark.parametrize("env, error", [
    (_BrokenRound(), "the environment's step_many raised OSError: the game server is down"),
    (_EarlyReward(), "the environment gave a reward (1.0) on a reply that does not end the episode "
                     "(Reply(done=True, reward=...) ends it)"),
    (_NanReward(), "the environment's reward nan is not a finite number"),
])
def test_a_broken_round_or_a_bad_reward_is_the_environments_failure(env, error):
    tok = chat_tokenizer()
    rows = [{"messages": [{"role": "user", "content": "q"}]}]
    out = multi_turn_generate(ScriptedEngine(tok, [("a", True)]), tok, env, rows, 2,
                              SamplingParams(max_new_tokens=8), max_turns=3, eos_ids=[tok.eos_token_id])
    assert [s.episode_reward for s in out.groups[0]] == [EpisodeReward(error=error)] * 2


# ------------------------------------------------------------------------------------------------ the example
GAMES = [{"question": "I picked a whole number from 1 to 8.", "answer": 6},
         {"question": "I picked a whole number from 20 to 31.", "answer": 20},
         {"question": "I picked a whole number from 40 to 47.", "answer": 44}]


def test_binary_search_wins_every_game_and_the_environment_answers_higher_or_lower():
    tok = chat_tokenizer()
    player = BinarySearchPlayer(tok)
    out = multi_turn_generate(player, tok, NumberGuessing(max_guesses=4), game_rows(), 1,
                              SamplingParams(max_new_tokens=32), max_turns=4, eos_ids=[tok.eos_token_id])
    samples = [g[0] for g in out.groups]
    assert [s.episode_reward for s in samples] == [EpisodeReward(1.0)] * 3
    # 1..8 for 6: 4 (higher), 6; 20..31 for 20: 25, 22, 20; 40..47 for 44: 43 (higher), 45 (lower), 44
    assert [[t.text for t in s.turns] for s in samples] == [["4", "6"], ["25", "22", "20"], ["43", "45", "44"]]
    assert [m["content"] for m in samples[2].messages if m["role"] == "user"][1:] == \
        ["My number is higher than 43.", "My number is lower than 45."]
    assert all(s.sampled_tokens < len(s.token_ids) for s in samples[1:])  # the replies are not the policy's


def game_rows() -> list[dict]:
    """:data:`GAMES` as rows a sampler hands ``reset`` (with the rendered conversation)."""
    return [{**g, "messages": [{"role": "user", "content": g["question"]}]} for g in GAMES]


@pytest.mark.parametrize("text, max_guesses, turns, rewards", [
    ("30", 4, [4, 4, 4], [0.0, 0.0, 0.0]),         # wrong every time: 4 guesses, reward 0
    ("I say 44.", 4, [4, 4, 1], [0.0, 0.0, 1.0]),  # the last number of the turn is the guess
    ("no idea", 2, [2, 2, 2], [0.0, 0.0, 0.0]),    # no number: a reminder, and the guess is spent
])
def test_the_game_ends_at_the_secret_or_after_max_guesses(text, max_guesses, turns, rewards):
    tok = chat_tokenizer()
    out = multi_turn_generate(ScriptedEngine(tok, [(text, True)]), tok, NumberGuessing(max_guesses=max_guesses),
                              game_rows(), 1, SamplingParams(max_new_tokens=64), max_turns=6,
                              eos_ids=[tok.eos_token_id])
    assert [g[0].episode_reward.reward for g in out.groups] == rewards
    assert [len(g[0].turns) for g in out.groups] == turns
    if text == "no idea":
        assert out.groups[0][0].messages[2]["content"] == "Answer with one whole number."


def test_the_last_allowed_turn_is_still_judged_and_an_answer_to_it_dropped():
    tok = chat_tokenizer()
    engine = ScriptedEngine(tok, [("30", True), ("44", True)])  # every game: 30, then 44
    out = multi_turn_generate(engine, tok, NumberGuessing(max_guesses=10), game_rows(), 1,
                              SamplingParams(max_new_tokens=64), max_turns=2, eos_ids=[tok.eos_token_id])
    samples = [g[0] for g in out.groups]
    assert [s.episode_reward for s in samples] == [EpisodeReward(None), EpisodeReward(None), EpisodeReward(1.0)]
    assert [len(s.turns) for s in samples] == [2, 2, 2] and {s.finish_reason for s in samples} == {"stop"}
    assert samples[0].turns[-1].answer is None and samples[0].messages[-1] == {"role": "assistant", "content": "44"}


def test_a_game_whose_row_hides_the_secret_fails_as_the_machinery_never_as_a_loss():
    tok = chat_tokenizer()
    rows = [{k: v for k, v in r.items() if k != "answer"} for r in game_rows()]
    out = multi_turn_generate(BinarySearchPlayer(tok), tok, NumberGuessing(), rows, 1,
                              SamplingParams(max_new_tokens=32), max_turns=4, eos_ids=[tok.eos_token_id])
    assert out.groups[0][0].episode_reward.error == ("the environment's reset raised KeyError: \"the row has no "
                                                     "'answer' (the secret): the game needs "
                                                     "rollout.environment_sees_gold: true\"")


def test_held_out_evaluation_scores_the_environments_reward_as_solved():
    from rlvr.runs.evaluation import run_eval
    from rlvr.runs.verifier_inputs import NoVerifiers

    tok = chat_tokenizer()
    player = BinarySearchPlayer(tok)
    recipe = _recipe(environment="rlvr.tools.envs.number_guessing:NumberGuessing", environment_sees_gold=True,
                     environment_reward_weight=3.0)
    sampler = build_tool_sampler(player, tok, recipe, [], [tok.eos_token_id])
    prompts = [_prompt(i, g) for i, g in enumerate(GAMES)]
    with torch.no_grad():
        res = run_eval(player, tok, prompts, NoVerifiers(), "env", k=2, temperature=1.0, max_new_tokens=32,
                       tools=sampler)
    assert res.pass_at_1 == 1.0 and res.mean_reward == 3.0 and res.tools["turns_per_sample"] == 8 / 3
