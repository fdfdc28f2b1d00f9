"""Hidden checks, run only at grading. This package is left out of the student release."""
from grader.hidden import tensors  # noqa: F401
