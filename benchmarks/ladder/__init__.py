"""The known-answer ladder: the extractor's learners against a perfect reward, beside a
supervised control (``docs/results/ladder.md``).
"""
