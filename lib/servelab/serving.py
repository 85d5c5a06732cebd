"""Moved to :mod:`servelab.analytic.serving`; this old path warns and finds its names there."""

from servelab._moved import moved

__getattr__ = moved(__name__)
