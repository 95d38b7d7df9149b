"""A run's configuration: the model, the hardware, the parallel layout and the software recipe,
the one value from which costs are built.

Each name below loads its module on first use (:mod:`pipesim.common.lazy`): the recipes'
names, which the command line's help lists, load without the models and the hardware.
"""

from typing import TYPE_CHECKING

from pipesim.common.lazy import lazy_exports

if TYPE_CHECKING:
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

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CHOICES": "pipesim.config.recipe",
        "Recipe": "pipesim.config.recipe",
        "DEFAULT_RECIPE": "pipesim.config.recipes",
        "RECIPES": "pipesim.config.recipes",
        "named_recipe": "pipesim.config.recipes",
        "RunConfig": "pipesim.config.run_config",
        "check_tensor_placement": "pipesim.config.run_config",
    },
)
