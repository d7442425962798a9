"""The RL trainer: the models of a run and one training step (:mod:`.trainer`), the run around the steps
(:mod:`.run`), and what a step is made of (workers, the algorithm's advantage stage, reward sources, dynamic sampling,
the update loop). Nothing but the CLI imports it."""
