"""The application around the simulator: what a process needs and a library does not.

Worker pools and Dask clusters (:mod:`application.workers`), the sweep runner over them
(:mod:`application.sweeps`), signals and lifetimes (:mod:`application.lifetime`), argument
plumbing and exit codes (:mod:`application.command_line`), output files checked before any work
and written atomically (:mod:`application.outputs`), a sweep's rows file that a run resumes from
(:mod:`application.rows_file`), and the benchmark suite (:mod:`application.bench`).

It sits above :mod:`pipesim` and below the packages that run as processes (``executor``,
``validation``, ``plots``' writers, ``cli``); the simulator never imports it.
"""
