"""Grading jobs and where they run: a batch of submissions (``grade``), the sandbox around each kernel and its
limits (``sandbox``, ``sandbox_init``, ``limits``), the guard that judges test cells while the kernel runs
(``kernel_guard``), fan-out over processes or Dask (``fanout``), nbgrader in its own process
(``nbgrader_process``), and the processes and staging folders a killed grader leaves (``procs``, ``staging``)."""

import sys

# jsonschema, which nbformat imports, builds a Lark grammar for its optional IRI format checker when rfc3987_syntax
# is installed: about 1.5 s in every grading process (bench/results.md), for a format no notebook schema uses.
# Marked missing before anything imports it, the checker is left out, as jsonschema does without the package.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[assignment]
