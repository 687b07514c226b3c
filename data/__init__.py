"""Data: test sets and benchmark instance files read into unit-square instances (Kool et al.'s sets,
.npz files, TSPLIB, CVRPLIB, Solomon), their reporting conventions, and reference solutions
(LKH, PyVRP) to measure gaps against."""
