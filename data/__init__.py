"""Data: test sets and benchmark instance files read into unit-square instances (Kool et al.'s sets,
.npz files, TSPLIB, CVRPLIB, Solomon, RouteFinder's files), solution files in the formats people
exchange, the route plots, and the shipped reference lengths (``reference_lengths/``)."""
