"""Moved to :mod:`servelab.kernels.cases` (the benchmark runner is scripts/bench_kernels.py); this old path warns
and finds its names there."""

from servelab._moved import moved

__getattr__ = moved(__name__)
