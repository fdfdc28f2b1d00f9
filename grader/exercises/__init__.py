"""Public checks, one module per chapter (named by the chapter's key: `tensors`, `dtypes`, ...).

Importing this package registers every chapter's exercises in the order of the chapters and, within
a chapter, of its notebook. A chapter without its module is an error (grader.registry.RegistryError).
"""
from grader.registry import import_chapters

import_chapters(__name__)
