"""The course library the notebooks use: timing (bench), device peaks (specs, cpuinfo, applegpu), memory
(memtrack, pagecache), real torch.distributed processes (distributed, ddp_record) and `python -m grader mfu`.

Apart from checking and grading: nothing here imports the rest of `grader`.
"""
