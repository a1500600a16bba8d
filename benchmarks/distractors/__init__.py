"""Distractors: does usefulness-aware retrieval recover a polluted store?
(``docs/experience-store.md``)
"""
