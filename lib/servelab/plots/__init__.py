"""Plots, one module per chapter family; each returns a matplotlib figure or draws on a given axis."""

from servelab._moved import moved_names

# servelab.plots was the batching plots module before it became this package
__getattr__ = moved_names(__name__)
