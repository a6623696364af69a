"""matrixbench.build.docker_client with the docker SDK faked at its one seam."""
import docker
import pytest
from docker.errors import APIError, DockerException

from docker_fakes import FakeImage, FakeSDK, client_with_leftovers
from matrixbench.build import docker_client
from matrixbench.build.docker_client import BuildStream, DockerClient
from matrixbench.errors import DockerUnavailableError, RunError


def test_connect_explains_how_to_start_a_daemon_that_is_not_running(monkeypatch):
    refused = DockerException("Error while fetching server API version: Connection refused")
    monkeypatch.setattr(docker, "from_env", lambda: FakeSDK(fail_ping=refused))
    monkeypatch.setenv("DOCKER_HOST", "unix:///nowhere/docker.sock")
    with pytest.raises(DockerUnavailableError) as caught:
        docker_client.connect()
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    assert "unix:///nowhere/docker.sock" in message
    assert "Connection refused" in message
    assert "systemctl start docker" in message and "--backend local" in message


def test_connect_returns_a_client_when_the_daemon_answers(monkeypatch):
    sdk = FakeSDK()
    monkeypatch.setattr(docker, "from_env", lambda: sdk)
    assert isinstance(docker_client.connect(), DockerClient)


def test_build_stream_joins_split_chunks_into_lines_and_keeps_a_tail():
    stream = BuildStream(tail_lines=2)
    assert stream.feed({"stream": "Step 1/9 : FROM base\n Col"}) == ["Step 1/9 : FROM base"]
    assert stream.feed({"stream": "lecting torch==2.0.1\n\n"}) == [" Collecting torch==2.0.1"]
    assert stream.feed({"stream": "10%\r50%\r100%\n"}) == ["100%"]
    assert list(stream.tail) == [" Collecting torch==2.0.1", "100%"]
    assert stream.error is None


def test_build_stream_records_the_error():
    stream = BuildStream()
    assert stream.feed({"aux": {"ID": "sha256:abc"}}) == []   # bookkeeping, not a log line
    lines = stream.feed({"error": "The command '/bin/sh -c pip install' returned a non-zero code: 1"})
    assert "returned a non-zero code: 1" in stream.error
    assert lines[0].startswith("ERROR: ")


def test_build_passes_context_args_and_labels_and_turns_sdk_errors_into_an_error_chunk():
    sdk = FakeSDK(build_chunks=[{"stream": "ok\n"}, APIError("500 Server Error: boom")])
    chunks = list(DockerClient(sdk).build(b"tar", "matrixbench:x", {"A": "1"}, {"l": "v"}, nocache=True))
    call = sdk.build_calls[0]
    assert call["fileobj"] == b"tar" and call["custom_context"] is True
    assert call["buildargs"] == {"A": "1"} and call["labels"] == {"l": "v"}
    assert call["nocache"] is True and call["decode"] is True
    assert chunks[0] == {"stream": "ok\n"}
    assert "boom" in chunks[-1]["error"]


def test_inspect_image_gives_id_and_labels_or_none():
    sdk = FakeSDK()
    sdk.images_by_tag["matrixbench:a"] = FakeImage("matrixbench:a", {"matrixbench.torch": "2.0.1"}, "sha256:1")
    client = DockerClient(sdk)
    info = client.inspect_image("matrixbench:a")
    assert (info.id, info.labels) == ("sha256:1", {"matrixbench.torch": "2.0.1"})
    assert client.inspect_image("matrixbench:missing") is None


# `nvidia-smi -L` as NVIDIA documents it: "GPU <index>: <name> (UUID: GPU-<uuid>)". Made-up UUIDs.
NVIDIA_SMI_L = (b"GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1d5b6f2e-8c3a-4f7e-9b21-5a0c3e7d9f41)\n"
                b"GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-7e2a9c4b-0d1f-4a63-8e55-b3c9d2f1a086)\n")


def test_gpu_probe_starts_a_throwaway_container_asking_for_gpus():
    sdk = FakeSDK()   # no nvidia runtime in `docker info`: the toolkit or CDI is enough
    sdk.next_container = {"log": NVIDIA_SMI_L, "exit_code": 0}
    lines = DockerClient(sdk).gpu_probe("matrixbench:stable")
    assert lines == [line.decode() for line in NVIDIA_SMI_L.splitlines()]
    probe = sdk.started[0]
    assert probe.kwargs["entrypoint"] == "nvidia-smi" and probe.command == ["-L"]
    (request,) = probe.kwargs["device_requests"]
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
    assert probe.calls[-1] == "remove" and sdk.started_live == []


def test_gpu_probe_without_gpus_is_empty():
    sdk = FakeSDK()
    sdk.run_error = APIError('could not select device driver "" with capabilities: [[gpu]]')
    assert DockerClient(sdk).gpu_probe("matrixbench:stable") == []
    assert sdk.started and not sdk.started_live   # the container Docker created but could not start: removed
    sdk.run_error = None
    sdk.next_container = {"log": b"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
                          "exit_code": 9}
    assert DockerClient(sdk).gpu_probe("matrixbench:stable") == []


def test_gpu_probe_and_containers_can_ask_for_chosen_gpus():
    sdk = FakeSDK()
    sdk.next_container = {"log": NVIDIA_SMI_L.splitlines(keepends=True)[1], "exit_code": 0}
    DockerClient(sdk).gpu_probe("img", device_ids=("1",))
    DockerClient(sdk).start_container("img", [], user="0:0", env={}, mounts={}, labels={}, gpus=True,
                                      gpu_ids=("GPU-7e2a9c4b-0d1f-4a63-8e55-b3c9d2f1a086",))
    first, second = (c.kwargs["device_requests"][0] for c in sdk.started)
    assert first["DeviceIDs"] == ["1"]
    assert second["DeviceIDs"] == ["GPU-7e2a9c4b-0d1f-4a63-8e55-b3c9d2f1a086"]


def test_start_container_asks_for_all_gpus_with_a_device_request():
    sdk = FakeSDK()
    DockerClient(sdk).start_container(
        "img", ["--out", "/r"], user="1000:1000", env={"A": "1"},
        mounts={"/host/results": ("/results", "rw")}, labels={"matrixbench": "1"}, gpus=True,
    )
    kwargs = sdk.started[0].kwargs
    (request,) = kwargs["device_requests"]
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
    assert kwargs["volumes"] == {"/host/results": {"bind": "/results", "mode": "rw"}}
    assert kwargs["user"] == "1000:1000" and kwargs["init"] is True and sdk.started[0].start_tried


def test_start_container_without_gpus_has_no_device_request():
    sdk = FakeSDK()
    DockerClient(sdk).start_container("img", [], user="0:0", env={}, mounts={}, labels={})
    assert sdk.started[0].kwargs["device_requests"] is None


def test_container_log_lines_rejoin_chunks_and_removal_of_a_gone_container_is_fine():
    sdk = FakeSDK()
    sdk.next_container = {"log": "cell 1/2 ok\ncell 2/2 ok\nbye".encode(), "exit_code": 3}
    container = DockerClient(sdk).start_container("img", [], user="0:0", env={}, mounts={}, labels={})
    assert list(container.log_lines()) == ["cell 1/2 ok", "cell 2/2 ok", "bye"]
    assert container.wait() == 3
    container.remove()
    container.remove()  # already gone: NotFound is swallowed


def test_find_containers_and_images_select_by_label():
    _, client = client_with_leftovers()
    assert len(client.find_containers({"matrixbench": None})) == 2
    assert len(client.find_containers({"matrixbench": None, "matrixbench.run_id": "r2"})) == 1
    assert client.find_images({"matrixbench": None}) == ["matrixbench:stable"]


def test_a_container_removed_between_listing_and_inspection_is_left_out_not_an_error():
    """Two Ray nodes on one daemon: one node's runner ends and its container goes while the other lists the run's
    (CI, stop 23: the task raised NotFound for /containers/<id>/json)."""
    sdk, client = client_with_leftovers()
    sdk.vanishing = {sdk.containers.sdk.started_live[0].id}
    assert len(client.find_containers({"matrixbench": None})) == 1


def test_a_container_docker_cannot_start_is_a_run_error_naming_the_image():
    sdk = FakeSDK()
    sdk.run_error = APIError("could not select device driver \"\" with capabilities: [[gpu]]")
    with pytest.raises(RunError, match="could not start a container of matrixbench:stable: .*device driver"):
        DockerClient(sdk).start_container("matrixbench:stable", [], user="0:0", env={"HF_TOKEN": "x"},
                                          mounts={}, labels={}, gpus=True)
    assert sdk.started[0].start_tried and sdk.started[0].calls == ["remove"] and not sdk.started_live   # no "Created"


def test_a_python_probe_docker_cannot_start_leaves_no_container():
    sdk = FakeSDK()
    sdk.run_error = APIError("error while creating mount source path")
    code, why = DockerClient(sdk).python_output("matrixbench:stable", "print(1)")
    assert code is None and "mount source path" in why and not sdk.started_live


def test_connect_without_the_docker_package_says_what_to_install(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_docker(name, *args, **kwargs):
        if name == "docker":
            raise ImportError("No module named 'docker'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_docker)
    with pytest.raises(DockerUnavailableError, match="pip install 'docker>=7'.*--backend local"):
        docker_client.connect()
