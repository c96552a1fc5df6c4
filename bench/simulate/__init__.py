"""Simulator studies: the static profiles (make_profiles) and the at-scale tables (at_scale)."""
