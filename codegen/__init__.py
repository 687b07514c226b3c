"""RLEA: an LLM writes OR-Tools programs for VRP variants described in words. The benchmark
(``benchmark``, its problems in ``problems/``), DRoC's files read as they are (``droc``), the LLM
backends (``llm``), the sandbox (``sandbox``), the executor (``executor``), the soft-Q planner
(``planner``), retrieval (``rag``, its notes in ``corpus/``), the memory (``memory``), one problem
solved by one method (``episodes``), the settings both scripts share (``settings``), the run's
files (``records``) and the CP-SAT optimality proofs (``proof``). Programs are judged by
``checkers.programs``; references come from ``solvers.rlea_references``."""
