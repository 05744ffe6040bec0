"""The benchmark problem, kept importable here for the bench modules and the lab probes.

The definitions live in :mod:`flashrepro.problem`, below both ``bench`` and ``analysis`` in the
import graph (both use them; neither imports the other's package for them).
"""

from flashrepro.problem import ARTICLE_TOML, DTYPES, Problem, add_grid_arguments, load_article

__all__ = ["ARTICLE_TOML", "DTYPES", "Problem", "add_grid_arguments", "load_article"]
