"""Lessons: what the extractor writes, and how a lesson is written, titled, gated, judged,
remembered and probed.

* :mod:`.core`: a lesson's titles and an episode's verdict from its lessons' (light: the
  family specs and envs use it);
* :mod:`.formats`: how the extractor writes one (``experience.extractor_format``: plain,
  stem, operations, search_and_ask);
* :mod:`.quality`: the quality gate a lesson passes before it is stored
  (``experience.min_quality``);
* :mod:`.memories` and :mod:`.exemplar`: memories without a model (``exemplar``, ``cases``);
* :mod:`.probe`: does an extractor write the right lesson after a win and after a loss?

The store lessons live in is :mod:`comprl_gym.experience`; how the extractor learns to write
them is :mod:`comprl_gym.trainers`. This package imports nothing at its top:
``comprl_gym.families`` reads :mod:`.core` while the other modules read the family specs.
"""
