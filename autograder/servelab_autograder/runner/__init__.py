"""Grading jobs and where they run: a batch of submissions (``grade``), the sandbox around each kernel and its
limits (``sandbox``, ``sandbox_init``, ``limits``), the guard that judges test cells while the kernel runs
(``kernel_guard``), fan-out over processes or Dask (``fanout``), nbgrader in its own process
(``nbgrader_process``), and the processes and staging folders a killed grader leaves (``procs``, ``staging``)."""
