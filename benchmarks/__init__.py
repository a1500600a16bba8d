"""The studies behind ``docs/results/``: one folder each, run from the checkout's root.

A study's folder holds its runner (``run.py``: ``python -m benchmarks.<study>.run``), the
renderers of its page's generated tables (``render.py``, found by ``scripts/update_docs.py``)
and whatever else is only its own; ``speed/`` holds the speed and soak benchmarks, one file
each. :mod:`benchmarks.common` is what the runners share, :mod:`benchmarks.tables` what the
renderers share; results are committed under ``benchmarks/results/``.
"""
