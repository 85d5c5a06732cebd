"""Put first on PYTHONPATH of the grader's child processes (runner.nbgrader_process.venv_path_env): jsonschema,
which nbformat imports, builds a Lark grammar for its optional IRI checker when the real package is installed,
about 1.5 s a process, for a format no notebook schema uses. Without it jsonschema leaves that checker out."""

raise ImportError("rfc3987_syntax is left out of the grader's processes (autograder/stubs)")
