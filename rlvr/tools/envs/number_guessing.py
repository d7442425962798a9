"""A number-guessing game: the environment answers, the model searches.

The model is asked for a whole number in a range (the dataset row's question, ``datasets/guessing.jsonl``); after
each wrong guess the environment replies "My number is higher than 27." (or lower) as a user turn, until the model
names the secret (the row's gold ``answer``: the recipe lets the environment see it,
``rollout.environment_sees_gold: true``) or has used ``max_guesses`` turns. The episode's reward is 1.0 when the
secret was named within ``max_guesses`` guesses, else 0.0; it enters the reward sum as ``reward/env``
(``recipes/guessing_demo.yaml``). A guess is the last whole number in the model's turn; a turn without one is
answered with a reminder and costs a guess. Binary search finds any secret of a range of w numbers in
ceil(log2(w + 1)) guesses; guessing at random without repeats finds it within g guesses with probability g / w.

    rollout:
      environment: rlvr.tools.envs.number_guessing:NumberGuessing
      environment_kwargs: {max_guesses: 4}
      environment_sees_gold: true
      max_turns: 4
"""

from __future__ import annotations

import re
from typing import Any

from rlvr.tools.environment import Environment, Episode, Message, Reply

_NUMBER = re.compile(r"-?\d+")


def last_number(text: str) -> int | None:
    """The last whole number written in ``text`` (``"I guess 12."`` -> 12), or None."""
    found = _NUMBER.findall(text)
    return int(found[-1]) if found else None


class NumberGuessing(Environment):
    """Answers each guess with "My number is higher (lower) than <guess>." until the secret is named or the guesses
    run out.

    Args:
        max_guesses: guesses per episode (>= 1); keep ``rollout.max_turns`` at least this large, or the turn budget
            ends the episode first (the last allowed turn is still judged).
        secret_field: the row field holding the secret (the dataset's gold answer).
    Raises:
        ValueError: ``max_guesses`` < 1.
    """

    def __init__(self, max_guesses: int = 4, secret_field: str = "answer") -> None:
        if max_guesses < 1:
            raise ValueError(f"max_guesses must be >= 1, got {max_guesses}")
        self.max_guesses = max_guesses
        self.secret_field = secret_field

    def reset(self, row: dict[str, Any]) -> list[Message] | str:
        """The row's conversation (its question as the dataset renders it).

        Raises:
            KeyError: the row has no secret (the recipe hides the gold: set ``rollout.environment_sees_gold: true``).
        """
        if self.secret_field not in row:
            raise KeyError(f"the row has no {self.secret_field!r} (the secret): the game needs "
                           "rollout.environment_sees_gold: true")
        return super().reset(row)

    def step(self, episode: Episode, assistant_message: str) -> list[Message] | Reply:
        secret = int(episode.row[self.secret_field])
        guess = last_number(assistant_message)
        if guess == secret:
            return Reply(done=True, reward=1.0)
        if episode.turns >= self.max_guesses:
            return Reply(done=True, reward=0.0)
        if guess is None:
            hint = "Answer with one whole number."
        else:
            hint = f"My number is {'higher' if secret > guess else 'lower'} than {guess}."
        if isinstance(episode.messages, str):  # a plain-text prompt (no chat template): the reply goes inline
            return Reply(text=f"\n{hint}\n")
        return [{"role": "user", "content": hint}]
