"""The forkserver's first preload module (runner.isolation.PRELOAD): before it imports torch and
transformers (seconds, minutes on a loaded machine), the forkserver asks to die with the runner that
started it, so a runner killed during its start-up (its host killed with ``kill -9``) leaves no
forkserver importing on, taking CPU from the run that resumes (issue 33). Stdlib only.

Anything else that imports this module does nothing: only the runner's forkserver inherits the
runner's pid in ``runner.lifetime.FORKSERVER_PARENT_VARIABLE``.
"""
from runner.faults import inject_in_forkserver
from runner.lifetime import forkserver_dies_with_runner

forkserver_dies_with_runner()
inject_in_forkserver()
