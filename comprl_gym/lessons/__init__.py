"""Lessons: what the extractor writes, and how a lesson is written, titled, gated, judged,
remembered and probed.

* :mod:`.core`: what a lesson is (a stem, a judge's verdict, a reading example, a family's
  lesson knowledge) and its titles; light, below the family specs that use it.

This package imports nothing at its top: ``comprl_gym.families`` reads :mod:`.core` while the
other modules read the family specs.
"""
