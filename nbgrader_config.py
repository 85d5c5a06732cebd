"""nbgrader reads its configuration from the working directory: the real one is autograder/nbgrader_config.py."""

load_subconfig("autograder/nbgrader_config.py")  # noqa: F821  (injected by traitlets)
