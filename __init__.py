"""ppo-or: CleanRL-style deep reinforcement learning for routing and railway scheduling, and LLM
agents that write solver programs (the import package ``ppoor``; a checkout is installed with
``pip install -e .``, which maps the package to the checkout's folder).

The public Python API (``search.solver``): ``ppoor.solve(data, ppoor.Decoding(...), checkpoint=...)``
and ``ppoor.Model(checkpoint)`` for repeated calls. They are imported on first use, so that
``import ppoor.envs`` stays light.
"""

__all__ = ["Decoding", "Model", "Solutions", "solve"]


def __getattr__(name: str):
    if name in __all__:
        from ppoor.search import decoding, solver

        return getattr(decoding if name == "Decoding" else solver, name)
    raise AttributeError(f"module 'ppoor' has no attribute {name!r}")
