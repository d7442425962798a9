"""What a run reads and writes: recipe inputs, checkpoints, metrics, plots, held-out evaluation, CPU time."""
