"""The RL math as pure tensor functions (torch only; no config objects, no I/O): group advantage estimators and the
global-batch whitening (:mod:`.advantages`), GAE (:mod:`.gae`), KL estimators and the adaptive coefficient
(:mod:`.kl`), policy losses and loss aggregation (:mod:`.losses`), the critic's value loss (:mod:`.value_loss`) and
per-token rewards for the PPO path (:mod:`.reward_shaping`)."""
