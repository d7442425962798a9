"""Example environments a recipe can name (``rollout.environment: rlvr.tools.envs.<module>:<Class>``), each a worked
example of :class:`rlvr.tools.environment.Environment`: :mod:`.number_guessing` (the environment answers each guess
with "higher" or "lower" and rewards a found number)."""
