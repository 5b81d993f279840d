"""The regression zoo: realistic changes to a small attention library, each run as a pull request would be, with
each change's effect measured apart as its ground truth.

- ``project/``: the library (``zooattn``, custom targets) and its suites (``perf/``), as a user's repository holds
  them; ``changes.py``: the changes, as hunks against it; ``trees.py``: the base and head trees of each.
- ``truth.py``: each change's effect, both trees in one process, interleaved CUDA-event timing.
- ``run.py``: each change through ``attnprof ab``, as a paired job through the embedded stack, and one unpaired
  profile; ``scoring.py``: what each comparison owed and gave, and the targets; ``report.py``:
  ``bench/reports/verdict-zoo.md`` from the folders they wrote.
- ``gpu.sh``: all of it on a GPU host in one command.

Run from the repository root: ``python -m bench.zoo.truth``, ``python -m bench.zoo.run`` (each with ``--quick``: two
changes, tiny shapes, a CPU host) and ``python -m bench.zoo.report FOLDER...``.
"""
