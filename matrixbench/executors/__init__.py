"""Where and when units run: one runner at a time, on slots, or as tasks on a Ray cluster (``ray/``)."""
