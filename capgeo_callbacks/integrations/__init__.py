"""Integrations with trainers other than Lightning (the Hugging Face ``Trainer``); each imports its framework
itself, so capgeo works without it."""
