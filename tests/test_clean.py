"""matrixbench clean with the docker SDK faked at docker_client's seam."""
from docker_fakes import FakeImage, FakeSDK
from matrixbench.clean import clean
from matrixbench.docker_client import DockerClient


def make_client():
    sdk = FakeSDK()
    client = DockerClient(sdk)
    for run_id in ("r1", "r2"):
        client.start_container("matrixbench:stable", [], user="0:0", env={}, mounts={},
                               labels={"matrixbench": "1", "matrixbench.run_id": run_id})
    client.start_container("postgres", [], user="0:0", env={}, mounts={}, labels={})
    sdk.images_by_tag["matrixbench:stable"] = FakeImage("matrixbench:stable", {"matrixbench": "1"})
    sdk.images_by_tag["postgres:16"] = FakeImage("postgres:16", {})
    return sdk, client


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
