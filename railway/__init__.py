"""Railway scheduling on the Flatland simulator: the decision env over Flatland's RailEnv (``env``),
the track geometry (``track``), the tree observation (``tree``), the safety layer (``safety``), the
policy (``policy``), playing episodes with a rule (``play``), what ``ppo_flatland.py``'s loop calls
(``trainer``) and the episode plot (``plot``). Needs the ``flatland`` extra."""
