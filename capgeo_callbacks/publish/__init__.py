"""What a run shows: side effects for every Lightning logger, figures, the TensorBoard dashboard layout and
the progress bar."""
