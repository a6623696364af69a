"""matrixbench clean with the docker SDK faked at docker_client's seam."""
from docker_fakes import client_with_leftovers as make_client
from matrixbench.build.clean import clean
from matrixbench.run.owner import Lease


def test_clean_removes_only_labelled_containers_and_keeps_images_by_default():
    sdk, client = make_client()
    removed = clean(client=client)
    assert len(removed) == 2 and all(line.startswith("container ") for line in removed)
    assert [c.image for c in sdk.started_live] == ["postgres"]
    assert set(sdk.images_by_tag) == {"matrixbench:stable", "postgres:16"}


def test_clean_of_one_run_and_its_images():
    sdk, client = make_client()
    removed = clean(client=client, run_id="r2", images=True)
    assert removed[1:] == ["image matrixbench:stable"]
    assert [c.labels.get("matrixbench.run_id") for c in sdk.started_live] == ["r1", None]
    assert set(sdk.images_by_tag) == {"postgres:16"}


def test_dry_run_removes_nothing():
    sdk, client = make_client()
    assert len(clean(client=client, images=True, dry_run=True)) == 3
    assert len(sdk.started_live) == 3 and len(sdk.images_by_tag) == 2


def test_a_removed_containers_lease_file_goes_with_it_not_on_a_dry_run(tmp_path):
    """A killed owner leaves its container's lease file (matrixbench.run.owner) beside the cells file; clean removes
    it with the container (only that very file: Lease.discard)."""
    sdk, client = make_client()
    lease_file = tmp_path / ".matrixbench-r1-stable-abc123.lease"
    lease_file.touch()
    info = lease_file.stat()
    labels = {"matrixbench": "1", **Lease(lease_file, f"{info.st_dev}:{info.st_ino}").labels()}
    client.start_container("matrixbench:stable", [], user="0:0", env={}, mounts={}, labels=labels)
    clean(client=client, dry_run=True)
    assert lease_file.exists()
    clean(client=client)
    assert not lease_file.exists()
