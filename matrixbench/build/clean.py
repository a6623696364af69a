"""`matrixbench clean`: remove the containers (and optionally images) matrixbench left behind."""
from matrixbench.build import docker_client
from matrixbench.run.owner import Lease


def clean(*, images=False, run_id=None, dry_run=False, client=None):
    """Remove labelled containers (of one run when ``run_id`` is given) and, with ``images``,
    every image `matrixbench build` made. Returns what was (or, with ``dry_run``, would be)
    removed, as "container <id>" / "image <tag>" lines."""
    client = client or docker_client.connect()
    selector = {docker_client.LABEL_MARK: None}
    if run_id is not None:
        selector[docker_client.LABEL_RUN_ID] = run_id
    removed = []
    for container in client.find_containers(selector):
        if not dry_run:
            container.remove()
            lease = Lease.from_labels(container.labels)   # its owner's lease file, which a killed owner left
            if lease is not None:
                lease.discard()
        removed.append(f"container {container.id[:12]}")
    if images:
        for tag in client.find_images({docker_client.LABEL_MARK: None}):
            if not dry_run:
                client.remove_image(tag)
            removed.append(f"image {tag}")
    return removed
