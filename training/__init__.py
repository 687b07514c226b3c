"""Training plumbing. Shared by the trainers (``ppo_or.py``, ``ppo_flatland.py``, ``ppo_priorities.py``,
``rlea.py``): PPO's loss (``ppo``, the PPO trainers'), the run object (``runs.Run``: folder, writer, training state, checkpoints, argument ranges, resume),
data-parallel helpers (``parallel``) and process settings (``runtime``). ``ppo_or.py``'s own:
its options (``options``: presets, ranges, checks, resume rules) and what its loop calls around the
algorithm (``routing``). The railway's and RLEA's live in ``railway.trainer`` and ``codegen.records``.
"""
