"""The embedded SWE-bench suite: git bundles of three small repositories and instances.json
(built from ``scripts/swebench_suite/repos/*.yaml`` by ``scripts/swebench_suite/build_suite.py``)."""
