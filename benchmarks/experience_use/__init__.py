"""Does SmolLM2 use a lesson untrained? (``docs/results/experience-use.md``); ``critique.py`` and
``extractor_output.py``: its critiques and what it writes as an extractor.
"""
