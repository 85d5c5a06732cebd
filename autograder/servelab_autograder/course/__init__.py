"""A chapter as learners receive it: the release built from the solutions notebook (``release``), scanned for
leaks (``leaks``), executed (``execute``), and a learner's own check of their notebook (``check``)."""
