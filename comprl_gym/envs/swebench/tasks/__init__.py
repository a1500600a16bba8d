"""The embedded SWE-bench suite: git bundles of three small repositories and instances.json
(regenerate with ``python -m comprl_gym.envs.swebench.tasks.build_suite``)."""
