"""Does the extractor learn what to write from credit alone?
(``docs/results/extractor-learning.md``)
"""
