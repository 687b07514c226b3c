"""ppo-or's import package, as a checkout sees it.

Installed (``pip install .``), setuptools maps the checkout's top-level folders and scripts into
the package ``ppoor`` (pyproject.toml: ``envs/`` is ``ppoor.envs``, ``ppo_or.py`` is
``ppoor.ppo_or``, ...). In a checkout this file gives the same names: the package's modules are
found in the folder above it, so ``python ppo_or.py`` and the tests import ``ppoor.envs`` without
an install.

The public Python API (``search.solver``): ``ppoor.solve(data, checkpoint=..., decode=...)`` and
``ppoor.Model(checkpoint)`` for repeated calls; the root ``__init__.py`` gives the installed package
the same names. They are imported on first use, so that ``import ppoor.envs`` stays light.
"""

import os

__path__ = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]

__all__ = ["Model", "Solutions", "solve"]


def __getattr__(name: str):
    if name in __all__:
        from ppoor.search import solver

        return getattr(solver, name)
    raise AttributeError(f"module 'ppoor' has no attribute {name!r}")
