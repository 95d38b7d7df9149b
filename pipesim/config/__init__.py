"""A run's configuration: the model, the hardware, the parallel layout and the software recipe,
the one value from which costs are built."""

from pipesim.config.recipe import CHOICES, Recipe
from pipesim.config.recipes import DEFAULT_RECIPE, RECIPES, named_recipe
from pipesim.config.run_config import RunConfig, check_tensor_placement

__all__ = [
    "CHOICES",
    "DEFAULT_RECIPE",
    "RECIPES",
    "Recipe",
    "RunConfig",
    "check_tensor_placement",
    "named_recipe",
]
