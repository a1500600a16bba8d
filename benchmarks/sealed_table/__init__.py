"""The pre-registered sealed table (``docs/results/sealed-table.md``; its plan:
``benchmarks/preregistered/``).
"""
