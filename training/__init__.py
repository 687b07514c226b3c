"""Training plumbing, shared by the trainers (``ppo_or.py``, ``ppo_flatland.py``, ``rlea.py``) and the
evaluation scripts: the run object (``runs.Run``: folder, writer, training state, checkpoints),
argument checks and resume (``runs``), data-parallel helpers (``parallel``), process settings
(``runtime``), and what each trainer's loop calls around its algorithm (``routing``, ``railway``,
``rlea``). The scripts show the algorithm; ``models/`` holds the networks.
"""
