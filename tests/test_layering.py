"""The course library (grader/course/) stands apart from checking and grading (issue 14 §4)."""
import ast
import json
from pathlib import Path

import grader.course

COURSE = Path(grader.course.__file__).parent


def grader_imports(tree: ast.AST) -> set[str]:
    """The grader modules (and names taken from grader or grader.course) that parsed code imports, at its top
    or inside a function."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names |= {f"{node.module}.{a.name}" if node.module in ("grader", "grader.course") else node.module
                      for a in node.names}
    return {n for n in names if n == "grader" or n.startswith("grader.")}


def test_the_course_library_imports_only_itself():
    """Catches a course module reaching into the grader (a check, a scenario, the runner): the notebooks'
    library must not depend on what grades them."""
    files = sorted(COURSE.glob("*.py"))
    assert len(files) >= 9, files
    outside = {f.name: sorted(n for n in grader_imports(ast.parse(f.read_text(encoding="utf-8")))
                              if not n.startswith("grader.course.")) for f in files}
    assert not any(outside.values()), outside


def test_no_notebook_imports_grading_code_as_lesson_code():
    """Catches a solution notebook's lesson code importing a scenario, a check or the runner to show something
    (chapter 03 once took its page-cache probe from grader.scenarios.memory); grader.check is the one call."""
    allowed = {"grader", "grader.bench", "grader.specs", "grader.memtrack", "grader.check"}
    for path in sorted(Path(__file__).resolve().parents[1].glob("solutions/[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        lesson = (c for c in cells if c["cell_type"] == "code"
                  and "solution-only" not in c["metadata"].get("tags", []))  # the last cell runs the checks: not lesson code
        for cell in lesson:
            source = "".join(cell["source"])
            lines = "\n".join(l for l in source.splitlines() if not l.lstrip().startswith(("%", "!")))
            for name in grader_imports(ast.parse(lines)):  # a %%writefile body is Python too
                assert name in allowed or name.startswith("grader.course."), (path.name, name)

