"""ppo-or: CleanRL-style deep reinforcement learning for routing (the installed package ``ppoor``).

The public Python API (``search.solver``): ``ppoor.solve(data, checkpoint=..., decode=...)`` and
``ppoor.Model(checkpoint)`` for repeated calls. A checkout imports ``ppoor/__init__.py`` instead,
which gives the same names. They are imported on first use, so that ``import ppoor.envs`` stays light.
"""

__all__ = ["Model", "Solutions", "solve"]


def __getattr__(name: str):
    if name in __all__:
        from ppoor.search import solver

        return getattr(solver, name)
    raise AttributeError(f"module 'ppoor' has no attribute {name!r}")
