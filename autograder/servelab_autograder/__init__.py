"""servelab's grader, split by trust side.

- ``exercises/``: what runs in the learner's kernel (the exercise modules, the probe, plain data); the only
  part the grading sandbox shows, and nothing there decides a verdict;
- ``paths``: where a chapter's notebooks live;
- ``judge/``: the trusted verdicts, the chapters' grading tables, known-wrong patches and mutants;
- ``runner/``: grading jobs, the sandbox and its limits, fan-out, the nbgrader processes;
- ``course/``: release, execute and check a chapter;
- ``testing/``: submissions built for the tests (known-wrong, tampered, hostile).

Each package imports only those listed before it (tests/test_layers.py).
"""
