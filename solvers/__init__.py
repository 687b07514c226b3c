"""Reference solvers, the one home of the classical solvers ppo-or measures against: ``references``
(LKH through elkai for TSP, PyVRP for CVRP and the VRP variants, OR-Tools and CP-SAT for the other
families, and the shipped reference lengths) and ``rlea_references`` (OR-Tools' routing with guided
local search and Held-Karp for RLEA's word problems). The solvers are the ``solvers`` extra."""
