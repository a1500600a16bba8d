"""Evaluation: episode runner, eval runs with confidence intervals, the leaderboard."""
