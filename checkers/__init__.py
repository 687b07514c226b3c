"""The independent checkers: every solution a decoder, solver or generated program produces is
validated and re-scored here, by code that shares nothing with what produced it. ``tours``: routing
tours of every problem family (validity, cost, TSPLIB's distance functions); ``programs``: the
answers of RLEA's generated programs (every constraint, the objective recomputed)."""
