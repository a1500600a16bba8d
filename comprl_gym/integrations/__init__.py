"""comprl envs in other libraries\x27 trainers (TRL)."""
