"""What runs in the learner's kernel: each chapter's exercise module (its specs, visible-test helpers and
drivers), the shared helpers, the probe that answers the grader's calls, plain data, and the pitfall atlases.

The grading sandbox shows this folder and nothing else of the grader; nothing here decides a verdict.
"""
