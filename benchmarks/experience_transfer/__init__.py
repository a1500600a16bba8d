"""Memory-family recipes trained and streamed, one result file per run
(``docs/results/memory-paper-table.md``, ``docs/results/lesson-reading.md``); ``pool_runs.py``
pools paired runs.
"""
