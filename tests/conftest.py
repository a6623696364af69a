"""Shared fixtures."""
import signal

import pytest


@pytest.fixture
def sigint_raises():
    """Python's own SIGINT handler for the test: a test run started as a background job inherits
    SIGINT ignored, and then neither ``kill -INT`` nor ``_thread.interrupt_main`` raise
    KeyboardInterrupt. Tests that send SIGINT use this; the previous handler comes back after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
