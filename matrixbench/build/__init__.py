"""Building the environments a matrix runs in: Docker images and venvs from each image's pins (``images``,
``venvs``, the shared ``wheelhouse`` and ``pip_script``), the interpreters they need, what a build really
holds (``facts``) and whether its CUDA build fits this host (``cuda_builds``), ``validate --build``'s
check of every model in every build (``check``), the one module that imports the docker SDK
(``docker_client``), version pins (``versions``) and ``matrixbench clean``."""
