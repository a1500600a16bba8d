"""``make demo``, measured (``docs/results/demo.md``); ``memory.py``: where its peak memory goes."""
