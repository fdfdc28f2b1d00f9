"""Hidden checks, run only at grading, one module per chapter. This package is left out of the student release."""
import importlib.util

from grader.chapters import NOTEBOOKS, key

for _stem in NOTEBOOKS:
    if importlib.util.find_spec(f"{__name__}.{key(_stem)}") is not None:
        importlib.import_module(f"{__name__}.{key(_stem)}")
