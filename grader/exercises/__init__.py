"""Public checks, one module per chapter (named by the chapter's key: `tensors`, `dtypes`, ...).

Importing this package registers every chapter's exercises in the order of the chapters and, within
a chapter, of its notebook. A chapter without a module yet is simply absent.
"""
import importlib.util

from grader.chapters import NOTEBOOKS, key

for _stem in NOTEBOOKS:
    if importlib.util.find_spec(f"{__name__}.{key(_stem)}") is not None:
        importlib.import_module(f"{__name__}.{key(_stem)}")
