"""Submissions built for the tests: complete, known-wrong, tampered and hostile notebooks (``submissions``)."""
