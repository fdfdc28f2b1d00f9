"""Grading a class's submissions: `python -m grader grade SUBMISSIONS --out OUT`.

The pipeline, one module per step:
  collect.py   find each student's notebooks (folders, zips, renamed files)
  kernel.py    run one notebook in a fresh, limited kernel that can be restarted and replayed
  bridge.py    call the student's functions in that kernel; only data comes back
  tamper.py    notice a notebook that patches the grader, torch's comparisons or tracebacks
  notebook.py  grade one notebook: run it, then run every check in this process
  cohort.py    grade every student in parallel, resumably; progress bar
  report.py    write grades.csv, gradebook.csv, results.json and feedback.html atomically
"""
