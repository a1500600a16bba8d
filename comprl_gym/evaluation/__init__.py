"""Evaluation: eval runs with confidence intervals, their statistics, the leaderboard.

Episodes are played by the rollout layer (:mod:`comprl_gym.rollouts`).
"""
