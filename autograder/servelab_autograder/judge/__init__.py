"""The trusted verdicts: each chapter's grading table (``checks/``), the engine that judges a learner's answers
against the reference outside the kernel (``verdicts``), the known-wrong patches that name a pitfall
(``known_wrong``) and the mutation test that proves the tables catch every non-equivalent change (``mutants``)."""
