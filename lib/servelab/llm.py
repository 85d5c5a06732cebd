"""Moved to :mod:`servelab.engine.llm`; this old path warns and finds its names there."""

from servelab._moved import moved

__getattr__ = moved(__name__)
