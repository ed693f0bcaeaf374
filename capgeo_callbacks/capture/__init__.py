"""Capturing hidden states: forward hooks that keep selected rows, the row selectors, the watched layers, and
the batch conventions (structure, answer masks) the measures are fed through."""
