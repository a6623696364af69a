"""Every error matrixbench raises on purpose is a MatrixbenchError; cli.py turns them into exit codes."""


class MatrixbenchError(Exception):
    """Base of all matrixbench errors. The message says what is wrong and how to fix it."""

    exit_code = 1


class MatrixError(MatrixbenchError):
    """matrix.yaml or a CLI override is invalid."""

    exit_code = 2


class DockerUnavailableError(MatrixbenchError):
    """No Docker daemon answers."""

    exit_code = 3


class BuildError(MatrixbenchError):
    """An image build failed; the message carries the build log tail."""

    exit_code = 4


class RunError(MatrixbenchError):
    """A run could not start or its container failed outside any cell."""

    exit_code = 5


class ManifestError(MatrixbenchError):
    """A run manifest (run.json) is unreadable or of an unknown schema version."""


class ReportError(MatrixbenchError):
    """Records cannot be read or merged into a report."""

    exit_code = 6


class PriceError(MatrixbenchError):
    """A --price that is not GPU_TYPE=DOLLARS_PER_GPU_HOUR (matrixbench.prices)."""

    exit_code = 2


class ResultsFolderError(MatrixbenchError):
    """The results folder cannot hold the run: under a file, or not writable."""

    exit_code = 2


class RunLockedError(RunError):
    """Another matrixbench run holds the run folder's lock."""


class ResumeConflictError(MatrixbenchError):
    """A run would resume records measured with other settings than it asks for."""

    exit_code = 2


class InterpreterNotFoundError(BuildError):
    """The venv backend finds no Python of the version an image asks for."""
