"""Environment families: one folder each, registered in comprl_gym.registration."""
