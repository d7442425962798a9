"""Recipes: the schema (:mod:`.schema`), presets (:mod:`.presets`), loading with ``--set`` overrides
(:mod:`.loading`) and the check of a resumed run's recipe (:mod:`.resume`). Imports no torch.

The names most callers need are importable from here.
"""

from rlvr.config.loading import (
                                 apply_overrides,
                                 describe_algorithm,
                                 dump_recipe,
                                 format_validation_error,
                                 load_any_recipe,
                                 load_recipe,
                                 load_recipe_dict,
                                 load_reward_model_recipe,
                                 resolve,
)
from rlvr.config.resume import check_resumed_recipe, recipe_changes
from rlvr.config.schema import (
                                 ALGORITHM_OF_ADVANTAGE,
                                 STD_NORMALIZE_DEFAULT,
                                 AdvantageConfig,
                                 AlgorithmConfig,
                                 CriticConfig,
                                 CurriculumConfig,
                                 DataConfig,
                                 DifficultyConfig,
                                 DynamicSamplingConfig,
                                 EvalConfig,
                                 HFSource,
                                 HumanEvalSource,
                                 JsonlSource,
                                 KLConfig,
                                 LoraConfig,
                                 ModelConfig,
                                 OptimConfig,
                                 OverlongConfig,
                                 PoolsConfig,
                                 PoolWeights,
                                 PreferenceDataConfig,
                                 ReasoningGymSource,
                                 Recipe,
                                 RecipeError,
                                 RewardConfig,
                                 RewardModelConfig,
                                 RewardModelRecipe,
                                 RewardModelTrainConfig,
                                 RolloutConfig,
                                 SolveRateConfig,
                                 StageConfig,
                                 TrainerConfig,
                                 VerifierConfig,
)

__all__ = [
    "AdvantageConfig", "ALGORITHM_OF_ADVANTAGE", "AlgorithmConfig", "apply_overrides", "check_resumed_recipe",
    "CriticConfig", "CurriculumConfig", "DataConfig", "describe_algorithm", "DifficultyConfig", "dump_recipe",
    "DynamicSamplingConfig", "EvalConfig", "format_validation_error", "HFSource", "HumanEvalSource", "JsonlSource",
    "KLConfig", "load_any_recipe", "load_recipe", "load_recipe_dict", "load_reward_model_recipe", "LoraConfig",
    "ModelConfig",
    "OptimConfig", "OverlongConfig", "PoolsConfig", "PoolWeights", "PreferenceDataConfig", "ReasoningGymSource",
    "Recipe", "recipe_changes", "RecipeError", "resolve", "RewardConfig", "RewardModelConfig", "RewardModelRecipe",
    "RewardModelTrainConfig", "RolloutConfig", "SolveRateConfig", "StageConfig", "STD_NORMALIZE_DEFAULT",
    "TrainerConfig", "VerifierConfig"
]
