"""Grading a class's submissions: `python -m grader grade SUBMISSIONS --out OUT`.

The pipeline, one module per step:
  collect.py     find each student's notebooks (folders, zips, renamed files)
  canvas.py      read Canvas's "Download submissions" (the zip or its folder) into the same submissions
  sandbox.py     what a kernel sees: the public grader only, inside bubblewrap (or as a kernel user)
  kernel.py      run one notebook in a fresh, limited kernel that can be restarted and replayed
  launch.py      start that kernel with its memory limit (counted on top of the kernel's own start-up)
  bridge.py      call the student's functions in that kernel, and run scenarios there; only data comes back
  kernel_side.py the code the bridge installs in the kernel (sent as text, never imported there)
  tamper.py      notice a notebook that patches the grader, torch's comparisons, autograd or tracebacks
  notebook.py    grade one notebook: run it, then run every check in this process
  cohort.py      grade every student in parallel, resumably; progress bar
  report.py      write grades.csv, gradebook.csv, results.json and feedback.html atomically
  adjust.py      the instructor's decisions applied as outputs are written: overrides.py (manual scores),
                 late.py (penalties), canvas_csv.py (canvas.csv); instructor_csv.py reads their files
  gradescope.py  grade one Gradescope submission into its results.json (the autograder zip runs it)
  whattofix.py   the top of feedback.html: each exercise not at full marks, its status, points lost, first problem
  regrade.py     --students / --exercises: regrade just those, keep every other record as it is
After grading:
  classstats.py  the class report's figures (class.json): chapters, exercises, checks, checks that may be unfair
  failures.py    group a check's failure messages after masking numbers and names
  charts.py      its plots (matplotlib, PNG bytes embedded in the page)
  classpage.py   class.json and class.html, written at the end of every run
  studentcode.py the code a student wrote for an exercise; the release's code is the boilerplate
  similarity.py  pairwise comparison per exercise (copydetect's winnowing), similarity_report.py its page and
                 CSV, similarity_cli.py `python -m grader similarity` (and `grade --similarity`)

Grading functions, classes, modules, autograd, files and processes: one mechanism.
Every check runs in this process and decides from data; the student's objects stay in their kernel.
A check receives, for each name the exercise grades, a `RemoteFunction` handle to the notebook's
object (function or class). Two things can be done with a handle:

* call it with plain data (tensors, numbers, strings, sizes, dtypes, containers of them): the
  arguments are pickled as plain values, the kernel calls the student's object, and the result comes
  back as plain data read by an unpickler that refuses every class. This covers functions of data
  (chapters 01 to 04, most of 10).
* pass it to `grader.scenario.run_scenario(scenario, *args)`: a *scenario* is a plain function in
  `grader/scenarios/<chapter>.py` that takes the student's objects plus plain specs and seeds, builds
  what it needs (modules from specs, optimizers, temporary files, simulated process groups), drives
  the student's code (forward, backward, a second derivative, an optimizer step, hooks, a save and a
  load), and returns plain data: outputs, gradients, parameter names and shapes, state_dict contents,
  hook counts, file listings, page faults. The bridge sends the scenario's name and arguments; the
  kernel runs its own copy of the scenario module, which was installed from the grader's source text
  at kernel start-up, before any student cell ran, as submodules of a private package (their relative
  imports, `from . import common`, resolve to each other, never to files the notebook could reach).
  Scenario modules bind the torch functions they rely on at import (`_grad = torch.autograd.grad`), so
  a notebook that patches torch later cannot change what they measure; they compute no expected value;
  what they build dies inside the call (gc of the young generations), so a misbehaving `__del__` is
  charged to its own check. The check computes every expected value itself, with torch bound at its
  own import, and compares.

In a student's notebook the same check code runs: `run_scenario` calls the scenario in-process and
passes the result through `grader.scenario.to_data`, which keeps exactly what the bridge would carry,
so a check sees the same data in both places. Exercises that are not plain functions therefore need
no special grading code: a scenario per kind of interaction, in the chapter's scenario module.

What stays protected: the tamper probe snapshots the grader's modules, the scenario modules and the
objects in `tamper.PROTECTED` (torch's comparisons, autograd's entry points, `nn.Module.__call__`,
`state_dict`, `torch.save`/`torch.load`, `os.replace`, ...) before the first student cell, and a
notebook that replaced any of them is `tampered`, with the score the independent checks found reported
for the instructor. Hangs anywhere (a forward, a backward, a `__del__`, a worker process) end at the
check's deadline: the kernel is interrupted, or killed and replayed, and every process the notebook
started is killed first (`NotebookKernel.kill_children`), so a hung `torch.distributed` rank never
outlives its check. Spawned workers inherit the kernel's address-space limit, its scratch folder and
a free port of their own.
"""
