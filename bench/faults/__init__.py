"""Randomized fault trials and the memory soak (see run.py, soak.py, README.md)."""
