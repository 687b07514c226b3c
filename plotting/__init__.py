"""Plots, one per file as in PyVRP: ``routes`` (eval.py --plot), ``railway`` (eval_flatland.py --render)."""
