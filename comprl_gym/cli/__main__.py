"""``python -m comprl_gym.cli``: the ``comprl-gym`` command."""

from comprl_gym.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
