"""matrixbench: the host orchestrator. It never imports torch."""
__version__ = "0.1.0"
