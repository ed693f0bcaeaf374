"""Integrations with other engines: the Hugging Face ``Trainer`` (:mod:`.hf`), and Ray Tune and Optuna
(:mod:`.tuning`: reporting to Tune, the capability stopper as a Tune stopper and an Optuna pruner). Each imports
its framework itself, so capgeo works without it."""
