"""Old module paths of the grader kept for notebooks released before the exercise modules moved to
``servelab_autograder.exercises`` (the part that runs in the learner's kernel). Each old path is a three-line
module that warns with a DeprecationWarning naming the new place (tests/test_layers.py imports each)."""

from servelab._moved import moved as _moved

OLD_PATHS = {f"servelab_autograder.{m}": f"servelab_autograder.exercises.{m}" for m in (
    *(f"ch{i:02d}" for i in range(1, 14)), "common", "plain", "probe", "spec")}


def moved(old: str):
    return _moved(old, OLD_PATHS)
