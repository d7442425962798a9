"""Pre-flight checks of a recipe: the expensive mistakes (a template that makes the format reward always 0, a stop id
missing, golds that do not verify, batch arithmetic that cannot split, a model that cannot fit), caught in seconds.

``rlvr check RECIPE.yaml`` runs them all and prints every finding; ``rlvr train``, ``rlvr eval`` and ``rlvr filter``
run them after opening their inputs and before loading the model (:func:`rlvr.runs.recipe_inputs.open_recipe_inputs`):
an error stops the command, a warning is printed and the run goes on.
"""

from rlvr.preflight.checks import CheckOptions, print_run_findings, run_checks
from rlvr.preflight.report import Finding, PreflightError, Report

__all__ = ["CheckOptions", "Finding", "PreflightError", "Report", "print_run_findings", "run_checks"]
