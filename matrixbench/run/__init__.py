"""Running a matrix and its results folder: the run command (``command``: pending cells through an
executor and an environment), one launch of a runner (``launch``), what is still pending and in which
order (``pending``, ``resume``), the folder's layout, lock, manifest and its one reader (``layout``,
``folder``, ``manifest``, ``results_files``), the runner's input file (``runner_input``), where each
concurrent runner goes (``placement``), progress, stop signals and who owns a run's containers."""
