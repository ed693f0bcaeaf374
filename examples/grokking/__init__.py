"""Grokking of modular arithmetic (Power et al. 2022), trained by a user's own function with capgeo attached."""
