"""gpus floor."""
