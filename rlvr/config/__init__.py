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
                                 load_stage_recipe,
                                 recipe_kind,
                                 resolve,
)
from rlvr.config.resume import check_resumed_recipe, recipe_changes
from rlvr.config.schema import (
                                 AdvantageConfig,
                                 AlgorithmConfig,
                                 CorrectionConfig,
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
                                 RunConfig,
                                 SandboxConfig,
                                 SolveRateConfig,
                                 StageConfig,
                                 TrainerConfig,
                                 VerifierConfig,
)
from rlvr.config.stage_schema import (
                                 DPODataConfig,
                                 DPORecipe,
                                 PreferenceObjectiveConfig,
                                 SFTDataConfig,
                                 SFTRecipe,
                                 StageEvalConfig,
                                 StageRecipe,
)

__all__ = [
    "AdvantageConfig", "AlgorithmConfig", "apply_overrides", "check_resumed_recipe", "CorrectionConfig",
    "CriticConfig", "CurriculumConfig", "DataConfig", "describe_algorithm", "DifficultyConfig", "dump_recipe",
    "DynamicSamplingConfig", "EvalConfig", "format_validation_error", "HFSource", "HumanEvalSource", "JsonlSource",
    "KLConfig", "load_any_recipe", "load_recipe", "load_recipe_dict", "load_reward_model_recipe", "LoraConfig",
    "ModelConfig",
    "OptimConfig", "OverlongConfig", "PoolsConfig", "PoolWeights", "PreferenceDataConfig", "ReasoningGymSource",
    "Recipe", "recipe_changes", "RecipeError", "resolve", "RewardConfig", "RewardModelConfig", "RewardModelRecipe",
    "RewardModelTrainConfig", "RolloutConfig", "SandboxConfig", "SolveRateConfig", "StageConfig", "TrainerConfig",
    "VerifierConfig", "RunConfig", "SFTRecipe", "DPORecipe", "StageRecipe", "SFTDataConfig", "DPODataConfig",
    "PreferenceObjectiveConfig", "StageEvalConfig", "load_stage_recipe", "recipe_kind",
]
