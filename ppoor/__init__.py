"""ppo-or's import package, as a checkout sees it.

Installed (``pip install .``), setuptools maps the checkout's top-level folders and scripts into
the package ``ppoor`` (pyproject.toml: ``envs/`` is ``ppoor.envs``, ``ppo_or.py`` is
``ppoor.ppo_or``, ...). In a checkout this file gives the same names: the package's modules are
found in the folder above it, so ``python ppo_or.py`` and the tests import ``ppoor.envs`` without
an install.
"""

import os

__path__ = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
