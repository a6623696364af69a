"""matrixbench clean with the docker SDK faked at docker_client's seam."""
from docker_fakes import client_with_leftovers as make_client
from matrixbench.build.clean import clean


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
