"""Statistics of per-document values, shared by the kinds, the training loop and the reports:
each metric's standard error as lm-evaluation-harness computes it (:mod:`.stderr`), the
per-document records every number is made of and the keys that name their standard errors
(:mod:`.records`), and means kept as sums that add over batches and ranks (:mod:`.sums`).

This room sits at the bottom: it imports nothing else of the package, so every room may import it.
"""
