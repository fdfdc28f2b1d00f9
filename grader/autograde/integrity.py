"""The grading process runs nothing a kernel could have written: a tripwire around every notebook it grades.

Watched: the file of every module the grading process has imported (and its compiled bytecode), the files
Python runs at start-up in every folder on its path (`sitecustomize`, `usercustomize`, `*.pth`, the user's
site folder included), any file there that would shadow a module it imported, and every file of the grader
package (hidden checks included) and of the public grader copy the kernels import. Any of them that appeared
or changed since the run began (its ctime, which no program can set back, is later) stops the run, with the
notebook named. Bytecode that appeared is accepted only if it is the compiled form of its unchanged source
(another process importing a module writes it). The sandbox makes all of these unwritable for a kernel; this is
what notices if that ever fails, or when grading runs without one.
"""
from __future__ import annotations

import importlib.util
import marshal
import os
import site
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

STARTUP = ("sitecustomize", "usercustomize")
_PYC_HEADER = 16


class Changed(RuntimeError):
    """A file the grading process runs changed during the run; the message names it (and what was graded)."""


def _changed_since(path: str, since: int) -> bool | None:
    """Whether `path`'s status changed after `since` (ns, see start); None when it does not exist."""
    try:
        return os.stat(path).st_ctime_ns > since
    except OSError:
        return None


def _same_code(pyc: str, source: str) -> bool:
    """Whether `pyc` holds exactly the code compiled from `source` (filenames aside), as an import writes it."""
    try:
        data = Path(pyc).read_bytes()
        code = marshal.loads(data[_PYC_HEADER:])
        text = Path(source).read_bytes()
        optimize = 2 if ".opt-2." in pyc else 1 if ".opt-1." in pyc else 0
        return code == compile(text, source, "exec", dont_inherit=True, optimize=optimize)
    except Exception:
        return False


@dataclass
class Watch:
    """What the grading process runs, as it was when the run began (`since`, from time.time_ns())."""
    since: int
    trees: tuple[str, ...]            # folders whose every file is watched (the grader package, the public copy)
    _paths: tuple[str, ...] = field(default=(), repr=False)
    # Whether a check found nothing changed. A grading worker checks before its first notebook and after each:
    # the check after one notebook is the check before the next (nothing of the worker's runs between them), and
    # each check stats every file of every module imported (35 ms of CPU with torch's).
    clean: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        self._paths = tuple(p for p in sys.path if p == "" or os.path.isdir(p))

    def _module_files(self) -> list[tuple[str, str]]:
        """(file, its source for bytecode else "") of every imported module."""
        found = []
        for module in list(sys.modules.values()):
            spec_file = getattr(module, "__file__", None)
            if not isinstance(spec_file, str):
                continue
            found.append((spec_file, ""))
            cached = getattr(module, "__cached__", None)
            if isinstance(cached, str) and spec_file.endswith(".py"):
                found.append((cached, spec_file))
        return found

    def _search_path_files(self) -> list[str]:
        """Start-up files and would-be shadows of imported modules in each folder Python searches."""
        imported = {name.partition(".")[0] for name in sys.modules}
        folders = [p or os.getcwd() for p in self._paths]
        if site.ENABLE_USER_SITE:
            folders.append(site.getusersitepackages())
        found = []
        for folder in folders:
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for name in names:
                stem = name.split(".", 1)[0]
                if name.endswith(".pth") or stem in STARTUP or (stem in imported and folder not in self._home(stem)):
                    found.append(os.path.join(folder, name))
        return found

    @staticmethod
    def _home(top: str) -> set[str]:
        """The folder a top-level module was imported from (a module's own folder is not a shadow of it)."""
        spec = sys.modules.get(top)
        where = getattr(spec, "__file__", None) or ""
        parent = os.path.dirname(where)
        return {os.path.dirname(parent), parent} if where else set()

    def _tree_files(self) -> list[tuple[str, str]]:
        found = []
        for tree in self.trees:
            for folder, _, files in os.walk(tree):
                for name in files:
                    path = os.path.join(folder, name)
                    source = ""
                    if name.endswith(".pyc") and os.path.basename(folder) == "__pycache__" and "cpython" in name:
                        try:
                            source = importlib.util.source_from_cache(path)
                        except ValueError:  # a name Python would not write (pytest's rewritten modules): no source
                            source = ""
                    found.append((path, source))
        return found

    def changed(self) -> list[str]:
        """Every watched file that appeared or changed since the run began (legitimate bytecode excepted)."""
        changed = []
        seen = set()
        for path, source in [*self._module_files(), *self._tree_files(), *((p, "") for p in self._search_path_files())]:
            if path in seen:
                continue
            seen.add(path)
            if _changed_since(path, self.since) and not (source and not _changed_since(source, self.since)
                                                          and _same_code(path, source)):
                changed.append(path)
        return sorted(changed)

    def watched(self) -> list[str]:
        """Every file this watch looks at, and the folders that hold them (a new file there is a change too)."""
        files = {path for path, _ in [*self._module_files(), *self._tree_files()]} | set(self._search_path_files())
        folders = {os.path.dirname(f) for f in files} | {p or os.getcwd() for p in self._paths}
        return sorted(files | folders)

    def writable_by(self, uid: int, gid: int) -> list[str]:
        """What of `watched` a user (uid, its only group gid) could change or add files to: for a kernel user,
        that must be nothing (its processes run as it, unsandboxed)."""
        found = []
        for path in self.watched():
            try:
                st = os.stat(path)
            except OSError:
                continue
            if ((st.st_uid == uid and st.st_mode & 0o200) or (st.st_gid == gid and st.st_mode & 0o020)
                    or st.st_mode & 0o002):
                found.append(path)
        return found

    def check(self, where: str) -> None:
        """Raise Changed naming the files and `where` (what was being graded) if anything changed."""
        changed = self.changed()
        self.clean = not changed
        if changed:
            more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
            raise Changed(f"{', '.join(changed[:5])}{more} changed during the grading run ({where}); nothing "
                          "graded since is kept. Check the machine before grading again")


def start() -> int:
    """The moment a run begins, for Watch.since, on the clock file times are kept by (the kernel's coarse clock,
    up to a tick behind time.time_ns()): the status time of a file made now."""
    fd, path = tempfile.mkstemp(prefix="grader-since-")
    try:
        return os.fstat(fd).st_ctime_ns
    finally:
        os.close(fd)
        os.unlink(path)
