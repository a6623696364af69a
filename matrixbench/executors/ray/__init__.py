"""The Ray executor: units as Ray tasks on a cluster (executor), what a task runs on its node (tasks),
images through a registry (registry). The only package that names Ray."""
