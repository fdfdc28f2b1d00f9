"""Grade a whole class: every student's notebooks, in parallel worker processes, resumably.

Each notebook's record is saved (atomically) as soon as it is graded, under OUT/.state; a re-run
reuses every record whose notebook and grader are unchanged, so a killed run resumes where it
stopped and ends with the same files. Student outputs are written when a student is complete,
the two class-wide CSVs after every student.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from grader import chapters as chapter_names
from grader import registry
from grader.registry import Registry
from grader.autograde import report
from grader.autograde.adjust import Options, prepare
from grader.autograde.canvas import collect_submissions
from grader.autograde.classpage import write_class_report
from grader.autograde.collect import Submission
from grader.autograde import charts, integrity, template, warm
from grader.autograde.kernel import Limits
from grader.autograde.launcher import Launcher, scratch_base
from grader.autograde.notebook import grade, whole_notebook
from grader.autograde.records import NotebookRecord
from grader.autograde.regrade import Selection
from grader.autograde.sandbox import Isolation, choose, public_tree
from grader.results import CRASHED, INVALID, Status

GRADER_DIR = Path(__file__).resolve().parents[1]


@dataclass
class Task:
    student: str
    chapter: str
    path: Path | None
    folder: Path | None
    source: str
    fingerprint: str
    message: str = ""       # why there is no notebook (missing or invalid)
    status: str = ""        # INVALID when the whole submission is unreadable


@dataclass
class Summary:
    students: int = 0
    notebooks: int = 0      # notebooks run in a kernel by this run
    reused: int = 0         # records kept from an earlier run
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    sandbox: str = ""       # how the kernels were isolated (Isolation.describe)
    written: set[Path] = field(default_factory=set)  # output files this run created or changed


def grader_fingerprint(limits: Limits) -> str:
    """Changes when any check, the grading code or the limits change: then old records are regraded."""
    h = hashlib.sha256(repr(limits).encode())
    for path in sorted(GRADER_DIR.rglob("*.py")):
        h.update(path.relative_to(GRADER_DIR).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def graded_chapters(subs: list[Submission], asked: list[str] | None, course: Registry) -> list[str]:
    """The chapters asked for, else every chapter some student submitted; only chapters that have exercises."""
    with_exercises = [c for c in chapter_names.NOTEBOOKS if course.of(chapter_names.key(c))]
    if asked:
        unknown = [c for c in asked if c not in chapter_names.NOTEBOOKS]
        if unknown:
            raise ValueError(f"unknown chapter(s) {', '.join(unknown)}; chapters: {', '.join(chapter_names.NOTEBOOKS)}")
        return [c for c in chapter_names.NOTEBOOKS if c in asked and c in with_exercises]
    found = {c for s in subs for c in s.chapters()}
    return [c for c in with_exercises if c in found] or with_exercises


def plan(subs: list[Submission], chapters: list[str], base: str) -> list[Task]:
    tasks = []
    for sub in subs:
        for chapter in chapters:
            found = sub.find(chapter)
            if sub.problem:
                tasks.append(Task(sub.student, chapter, None, None, "", "", f"the submission is {sub.problem}", INVALID))
                continue
            digest = ""
            if found.path is not None:
                h = hashlib.sha256(base.encode())
                h.update(found.path.read_bytes())
                digest = h.hexdigest()
            tasks.append(Task(sub.student, chapter, found.path, found.folder, found.source, digest, found.message))
    return tasks


def state_path(out: Path, student: str, chapter: str) -> Path:
    """Where a notebook's record is kept: OUT/.state/<student>/<chapter>.json."""
    return report.student_dir(out / ".state", student) / f"{chapter}.json"


def _load(out: Path, task: Task) -> NotebookRecord | None:
    """The task's record in OUT/.state, whatever it was graded with (None when there is none to read)."""
    try:
        data = json.loads(state_path(out, task.student, task.chapter).read_text(encoding="utf-8"))
        record = NotebookRecord.from_dict(data)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return record if record.student == task.student else None


def _reuse(out: Path, task: Task) -> NotebookRecord | None:
    record = _load(out, task)
    return record if record is not None and record.fingerprint == task.fingerprint else None


@dataclass(frozen=True)
class Guard:
    """What every worker of one run shares: the secret its hidden checks draw their inputs with, where its
    tripwire (integrity.Watch) starts from, and whether every cell runs (`--whole-notebooks`)."""
    salt: str
    since: int
    trees: tuple[str, ...]
    whole: bool = False


SEED_FILE = "seed"  # OUT/.state/seed: the run's secret, for the instructor to replay it (--seed)


def run_seed(out: Path, given: str | None) -> str:
    """The secret the hidden checks draw with: `given` (--seed), else the one this output folder recorded (a
    resumed run draws what it began with), else a new one; recorded in OUT/.state/seed either way."""
    path = out / ".state" / SEED_FILE
    if given is None:
        try:
            given = path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            given = ""
    seed = given or secrets.token_hex(16)
    if not path.is_file() or path.read_text(encoding="ascii").strip() != seed:
        report.write_atomic(path, seed + "\n")
    return seed


_WATCH: integrity.Watch | None = None


def _watch(guard: Guard) -> integrity.Watch:
    """This worker's tripwire for the run `guard` belongs to."""
    global _WATCH
    if _WATCH is None or _WATCH.since != guard.since:
        _WATCH = integrity.Watch(guard.since, guard.trees)
    return _WATCH


def _worker_init(environ: dict[str, str], cwd: str, limits: Limits, isolation: Isolation,
                 kernel_template: Path | None) -> None:
    """The grading process's environment and folder (a forkserver's workers would otherwise have the server's,
    from its start), the run's kernel template (template.py), torch's threads, and the checks. It writes no
    bytecode: nothing it runs changes while it grades (integrity.py)."""
    import torch

    sys.dont_write_bytecode = True
    warm.AHEAD.enable()
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    template.TEMPLATE.attach(kernel_template, isolation, _kernel_env(limits, isolation))
    registry.load(hidden=True)  # once per worker, before its first notebook
    torch.set_num_threads(1)  # the checks here are small; the cores belong to the kernels


def _kernel_env(limits: Limits, isolation: Isolation) -> dict[str, str]:
    """A kernel's environment in this run (template.py keeps of it what is the same for every notebook)."""
    return Launcher(limits, isolation, Path("/"), Path("/"), "").env()


def _ready() -> None:
    """A no-op task: submitting it makes the pool start its workers now."""


def _run(task: Task, limits: Limits, scratch_root: str, isolation: Isolation | None = None,
         guard: Guard | None = None, more: bool = True) -> NotebookRecord:
    """In a worker: grade one notebook in its own scratch folder; a grader failure is a status, never a raise.
    Only integrity.Changed (what the grading process runs changed, before or during it) is raised: it stops the run.
    `more`: notebooks are still queued, so a kernel started ahead here will have one to grade (warm.py)."""
    warm.AHEAD.wanted = more
    watch = _watch(guard) if guard is not None else None
    where = f"{task.student}/{task.chapter}"
    if watch is not None and not watch.clean:  # after its first notebook, the last one's check came just before
        watch.check(f"found before grading {where}")
    scratch = Path(tempfile.mkdtemp(prefix="nb-", dir=scratch_root))
    course = registry.load(hidden=True)
    try:
        record = grade(task.student, task.chapter, task.path, task.folder, scratch, limits, course, task.source,
                       task.fingerprint, task.message, isolation, guard.salt if guard is not None else "",
                       guard.whole if guard is not None else False)
    except BaseException as e:  # a bug in the grader must cost one notebook, not the class
        record = NotebookRecord(task.student, task.chapter, task.source, "", 0.0, whole_notebook(
            task.student, task.chapter, CRASHED, f"the grader itself failed on this notebook: {type(e).__name__}: {e}",
            course))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if watch is not None:
        watch.check(f"found after grading {where}")
    return record


def unread_record(task: Task, course: Registry) -> NotebookRecord:
    """The record of a missing or unreadable submission: it needs no kernel (also made by merge.py)."""
    status = task.status or Status.MISSING
    return NotebookRecord(task.student, task.chapter, task.source, task.fingerprint, 0.0,
                          whole_notebook(task.student, task.chapter, status, task.message, course))


@dataclass(frozen=True)
class Shard:
    """`--shard i/n`: this run grades the students whose name hashes to i (of n); the other shards grade the rest
    and `python -m grader merge` joins them (merge.py)."""
    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> "Shard":
        """From `i/n`, 1 <= i <= n; ValueError says what is wrong."""
        i, _, n = text.partition("/")
        try:
            shard = cls(int(i), int(n))
        except ValueError:
            raise ValueError(f"--shard must be i/n, e.g. 2/8, not {text!r}") from None
        if not 1 <= shard.index <= shard.count:
            raise ValueError(f"--shard {text}: i must be between 1 and n")
        return shard

    def holds(self, student: str) -> bool:
        """Whether this shard grades `student`: a stable hash of the name, the same on every machine."""
        digest = int.from_bytes(hashlib.sha256(student.encode("utf-8")).digest()[:8], "big")
        return digest % self.count == self.index - 1


SHARD_FILE = "shard.json"  # OUT/.state/shard.json: what a shard graded, for merge


@dataclass
class Plan:
    """One run, decided before any notebook is graded: the class, the chapters, what to grade and what to keep."""
    students: list[str]              # the students this run writes (a shard's, else the class)
    everyone: list[str]              # the whole class, in the order collected
    chapters: list[str]
    adjust: object                   # adjust.Adjustments | None
    records: dict[tuple[str, str], NotebookRecord]
    pending: list[Task]
    reused: int
    previous: dict[tuple[str, str], NotebookRecord | None]
    salt: str
    warnings: list[str]


def _plan(found, out: Path, course: Registry, options: Options, chapters: list[str] | None,
          selection: Selection | None, shard: Shard | None, seed: str | None, base: str) -> Plan:
    """Everything this run will do; ValueError (an unknown name, a bad instructor file) before any output."""
    subs, warnings = found.submissions, list(found.warnings)
    chosen = graded_chapters(subs, chapters, course)  # from the whole class, so every shard grades the same chapters
    everyone = [s.student for s in subs]
    if selection is not None:
        selection.check(everyone, chosen, course)
        warnings.append(selection.describe())
    adjust, notes = prepare(options, found, chosen, out, course)  # overrides, late work, canvas.csv
    warnings.extend(notes)
    if shard is not None:
        if seed is None:
            raise ValueError("--shard needs --seed: every shard of a class must draw the same hidden inputs")
        warnings.append(f"shard {shard.index}/{shard.count}: join the shards' OUT folders with `python -m grader merge`")
    salt = run_seed(out, seed)
    mine = [s for s in subs if shard is None or shard.holds(s.student)]
    run = Plan([s.student for s in mine], everyone, chosen, adjust, {}, [], 0, {}, salt, warnings)
    for task in plan(mine, chosen, base + ":" + salt):
        if task.path is None:
            run.records[(task.student, task.chapter)] = unread_record(task, course)
        elif (old := _reuse(out, task) if selection is None else
              selection.keep(task.student, task.chapter, _load(out, task), course, run.previous)) is not None:
            run.records[(task.student, task.chapter)] = old
            run.reused += 1
        else:
            run.pending.append(task)
    # Biggest notebooks first (more solved, more to run): the last worker to finish waits least.
    run.pending.sort(key=lambda t: -t.path.stat().st_size if t.path else 0)
    if shard is not None:
        report.write_atomic(out / ".state" / SHARD_FILE, json.dumps(
            {"shard": [shard.index, shard.count], "class": everyone, "chapters": chosen, "seed": salt},
            ensure_ascii=False, indent=1) + "\n")
    return run


class Writer:
    """Writes what grading produces as it comes: each record at once (a killed run resumes from them), a student's
    files when the student is complete, the class's files after every student and once at the end."""

    def __init__(self, out: Path, run: Plan, summary: Summary, selection: Selection | None,
                 class_report: bool = True) -> None:
        self.out, self.run, self.summary, self.selection = out, run, summary, selection
        self.class_report = class_report
        self.left = {s: sum(1 for t in run.pending if t.student == s) for s in run.students}

    def complete(self) -> list[str]:
        """The students with nothing to grade (their files are written now)."""
        done = [s for s in self.run.students if self.left[s] == 0]
        for s in done:
            self._student(s)
        return done

    def record(self, record: NotebookRecord) -> bool:
        """Keep one graded notebook's record; True when its student is now complete."""
        if self.selection is not None:
            record = self.selection.merge(self.run.previous.get((record.student, record.chapter)), record)
        self.run.records[(record.student, record.chapter)] = record
        report.write_atomic(state_path(self.out, record.student, record.chapter),
                            json.dumps(record.to_dict(), ensure_ascii=False, indent=1, sort_keys=True) + "\n")
        self.summary.notebooks += 1
        self.left[record.student] -= 1
        if self.left[record.student] == 0:
            self._student(record.student)
            return True
        return False

    def _student(self, student: str) -> None:
        mine = [r for (s, _), r in self.run.records.items() if s == student]
        self.summary.written.update(report.write_student(self.out, student, mine, self.run.adjust))
        if self.selection is None:  # a regrade writes the class's files once, at the end
            self._class()

    def _class(self) -> None:
        self.summary.written.update(report.write_cohort(self.out, self.run.records.values(), self.run.students,
                                                        self.run.chapters, self.run.adjust))

    def finish(self) -> None:
        """The class's files, written once more at the end (also when there were no students)."""
        self._class()
        if self.class_report:
            self.summary.written.update(write_class_report(self.out, self.run.records.values(), self.run.students,
                                                           self.run.chapters, self.run.adjust, self.summary.warnings,
                                                           self.summary.sandbox))


_COLUMNS = (TextColumn("[bold]grading"), BarColumn(bar_width=10), TextColumn("{task.completed}/{task.total} students"),
            TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(), TextColumn("{task.fields[current]}"))


def grade_cohort(submissions: Path, out: Path, workers: int, limits: Limits, chapters: list[str] | None = None,
                 console: Console | None = None, sandbox: str = "auto", kernel_user: str = "",
                 options: Options | None = None, selection: Selection | None = None,
                 seed: str | None = None, whole: bool = False, shard: Shard | None = None,
                 class_report: bool = True) -> Summary:
    """Grade every submission under `submissions` into `out`; returns what was done.
    `sandbox` (auto, on, off) and `kernel_user`: see sandbox.choose; "on" raises SandboxUnavailable where it cannot.
    `seed`: the secret the hidden checks draw their inputs with (run_seed); integrity.Changed stops the run.
    `whole`: run every cell, the unchanged demonstrations too (grader/demonstrations.py).
    `selection`: regrade only those students or exercises, keeping every other record (regrade.py).
    `shard`: grade only this shard's students (merge.py joins the shards).
    `class_report`: False where nobody reads OUT/class.html (Gradescope's one student, in a folder thrown away)."""
    course = registry.load(hidden=True)
    start = time.monotonic()
    console = console or Console(stderr=True)
    options = options or Options()
    with tempfile.TemporaryDirectory(prefix="grader-", dir=scratch_base()) as scratch_root:
        os.chmod(scratch_root, 0o711)  # a kernel user reaches its own notebook's folder in here, nothing else
        public = public_tree(Path(scratch_root))
        isolation = choose(sandbox, public, kernel_user=kernel_user)
        found = collect_submissions(submissions, Path(scratch_root) / "zips", options.canvas)  # folders, zips or Canvas's
        if (Path(scratch_root) / "zips").is_dir():
            os.chmod(Path(scratch_root) / "zips", 0o700)  # other students' unpacked zips: never a kernel user's
        base = grader_fingerprint(limits) + ":" + isolation.kind + (":whole" if whole else "")
        run = _plan(found, out, course, options, chapters, selection, shard, seed, base)
        guard = Guard(run.salt, integrity.start(), (str(GRADER_DIR), str(public)), whole)
        summary = Summary(students=len(run.students), warnings=run.warnings, sandbox=isolation.describe(),
                          reused=run.reused)
        writer = Writer(out, run, summary, selection, class_report)
        done = writer.complete()
        # A kernel template costs the imports of one kernel and saves most of each kernel's start: it is worth
        # starting for two notebooks or more.
        with template.serving(isolation, _kernel_env(limits, isolation), scratch_root, wanted=len(run.pending) >= 2,
                              dynamo=kernel_dynamo({t.chapter for t in run.pending})) as kernel_template:
            pool = (_pool(workers, start_method(), limits, isolation, kernel_template,
                           {t.chapter for t in run.pending}) if run.pending else None)
            if class_report:
                charts.prepare()  # the class report's drawing, imported while the workers wait for the template
            with Progress(*_COLUMNS, console=console, transient=False) as progress:
                bar = progress.add_task("grading", total=len(run.students), completed=len(done), current="")
                for record in _execute(run.pending, pool, workers, limits, scratch_root, isolation, course,
                                       lambda running: progress.update(bar, current=_short(running)), guard,
                                       kernel_template):
                    if writer.record(record):
                        progress.advance(bar)
        writer.finish()
    summary.seconds = round(time.monotonic() - start, 1)
    return summary


def _short(running: list[str], width: int = 26) -> str:
    """The notebook in flight (and how many more), cut to fit beside the bar on an 80-column terminal."""
    if not running:
        return ""
    more = f" +{len(running) - 1}" if len(running) > 1 else ""
    first = running[0] if len(running[0]) + len(more) <= width else running[0][: width - len(more) - 1] + "…"
    return first + more


def _execute(tasks: list[Task], pool: ProcessPoolExecutor | None, workers: int, limits: Limits, scratch_root: str,
             isolation: Isolation, course: Registry, show, guard: Guard | None = None,
             kernel_template: Path | None = None):
    """Yield each task's record as it is done, keeping `workers` notebooks running; a dead worker is replaced.
    integrity.Changed from a worker stops everything: nothing queued starts, what runs finishes unrecorded."""
    queue = list(tasks)
    tries: dict[int, int] = {}
    while queue:
        # A replacement pool is spawned: forking now would copy the progress bar's thread mid-flight.
        pool = pool or _pool(workers, "spawn", limits, isolation, kernel_template, {t.chapter for t in queue})
        with pool:
            running: dict[Future, Task] = {}
            broken = False
            while (queue or running) and not broken:
                while queue and len(running) < max(1, workers):
                    task = queue.pop(0)
                    # A kernel started ahead is worth its start only if a notebook is left for each worker.
                    more = len(queue) >= max(1, workers)
                    running[pool.submit(_run, task, limits, scratch_root, isolation, guard, more)] = task
                show([f"{t.student}/{t.chapter}" for t in running.values()])
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    task = running.pop(fut)
                    try:
                        yield fut.result()
                    except integrity.Changed as e:
                        beside = ", ".join(f"{t.student}/{t.chapter}" for t in running.values())
                        pool.shutdown(wait=True, cancel_futures=True)
                        raise integrity.Changed(f"{e}" + (f" (graded at the same time: {beside})" if beside else "")
                                                ) from None
                    except BrokenProcessPool:
                        broken = True
                        tries[id(task)] = tries.get(id(task), 0) + 1
                        if tries[id(task)] >= 2:
                            yield NotebookRecord(task.student, task.chapter, task.source, "", 0.0, whole_notebook(
                                task.student, task.chapter, CRASHED, "the grading process died twice on this notebook",
                                course))
                        else:
                            queue.insert(0, task)
            if broken:
                queue[:0] = list(running.values())
        pool = None
    show([])


# What every worker needs and touches no GPU, imported once before the workers start (by the forkserver, or by this
# process when they fork from it) instead of once per worker: torch; the symbolic shapes (with sympy) that the
# first backward() imports, which reference checks call; matplotlib's font list, copied into each kernel's home
# (sandbox.prepare_home). The checks touch CUDA (importing torch.utils.benchmark asks whether it is available),
# so under a forkserver each worker imports them itself.
_PRELOAD = ["torch", "torch.fx.experimental.symbolic_shapes", "matplotlib.font_manager"]
# torch._dynamo too, where the run grades a chapter whose checks import it in the worker (its first torch.optim
# optimizer or FlopCounterMode: 1.4 CPU-seconds in each worker otherwise); a run of other chapters alone (the
# chapter 01 assignment, say) would pay it for nothing. Measured: grading each chapter's
# solution with this left out, only these chapters' workers imported it (docs/measurements.md).
_DYNAMO_CHAPTERS = frozenset({"02_dtypes", "03_memory", "04_flops", "05_autograd", "10_ddp"})


# The chapters whose notebooks, as grading runs them, never import torch._dynamo in the kernel: measured by grading
# the demo's solved student with a template that did not import it, every kernel reporting whether it was imported
# by the end (the other chapters' kernels all imported it; docs/measurements.md). A run of these alone (a chapter 01
# assignment) starts a template without it, a CPU-second less; any other chapter, one not listed included, gets it.
_KERNELS_WITHOUT_DYNAMO = frozenset({"01_tensors", "10_ddp"})


def kernel_dynamo(chapters: set[str]) -> bool:
    """Whether the kernels of a run grading `chapters` import torch._dynamo (so the kernel template imports it)."""
    return not chapters <= _KERNELS_WITHOUT_DYNAMO


def preload(chapters: set[str]) -> list[str]:
    """What the workers of a run grading `chapters` start with."""
    return _PRELOAD + (["torch._dynamo"] if chapters & _DYNAMO_CHAPTERS else [])


def start_method() -> str:
    """How the workers start. Forked (Linux) they begin with torch and the checks imported, but CUDA does not
    survive a fork, and importing the checks asks CUDA whether it is there: a forked worker's CUDA calls then
    fail ("initialization error"). So where torch is built with CUDA the workers fork from a forkserver, a
    fresh process that has imported torch only; spawn elsewhere (Windows has no fork, macOS's frameworks are
    not fork-safe)."""
    import torch

    if sys.platform != "linux":
        return "spawn"
    return "forkserver" if torch.backends.cuda.is_built() else "fork"


def _pool(workers: int, method: str, limits: Limits, isolation: Isolation, kernel_template: Path | None,
          chapters: set[str]) -> ProcessPoolExecutor:
    """Worker processes for grading `chapters`, started at once (a forked pool before any other thread exists),
    connected to the run's kernel template if there is one."""
    ctx = get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(preload(chapters))  # takes effect when the server starts, at the first pool
    elif method == "fork":
        for name in preload(chapters):
            importlib.import_module(name)
    pool = ProcessPoolExecutor(max_workers=max(1, workers), mp_context=ctx, initializer=_worker_init,
                               initargs=(dict(os.environ), os.getcwd(), limits, isolation, kernel_template))
    for fut in [pool.submit(_ready) for _ in range(max(1, workers))]:
        fut.result()
    return pool


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
