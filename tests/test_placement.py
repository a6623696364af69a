"""Slots (matrixbench.run.placement): cores split into disjoint slots; on GPU hosts one slot per GPU
with cores of its NUMA node, against nvidia-smi outputs written by hand from NVIDIA's documented
formats (tests/data/gpu/nvidia-smi/README.md)."""
from pathlib import Path

import pytest

from matrixbench.errors import RunError
from matrixbench.gpu import BUS_QUERY, parse_bus_ids
from matrixbench.run.placement import (
    Slot,
    busy_gpu_apps,
    check_gpus_free,
    format_cpulist,
    parse_cpulist,
    parse_topology,
    plan_slots,
    split_evenly,
    sysfs_bus_id,
    usable_cores,
)

DATA = Path(__file__).parent / "data" / "gpu" / "nvidia-smi"
HOST_CORES = tuple(range(256))     # the 2x64-core, 2-thread machine of a100x8-topo.txt
NODE0 = set(range(0, 64)) | set(range(128, 192))
NODE1 = set(range(64, 128)) | set(range(192, 256))


SYSFS = Path(__file__).parent / "data" / "gpu" / "sysfs" / "h100x8"
H100_NODE0 = set(range(0, 56)) | set(range(112, 168))
H100_NODE1 = set(range(56, 112)) | set(range(168, 224))


def smi(topo="a100x8-topo.txt", gpus="a100x8-query-gpu.csv", bus_ids=None):
    """nvidia-smi replaying the hand-written outputs; None: that command fails (exit 9)."""
    def run(argv):
        if argv[1] == f"--query-gpu={BUS_QUERY}":
            return (0, (DATA / bus_ids).read_text()) if bus_ids else (9, "")
        if argv[1].startswith("--query-gpu="):
            return 0, (DATA / gpus).read_text()
        if argv[1:] == ["topo", "-m"]:
            return (0, (DATA / topo).read_text()) if topo else (9, "")
        raise AssertionError(argv)
    return run


def test_cpulists_round_trip():
    assert parse_cpulist("0-3,8,10-11") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpulist("N/A") == ()
    assert format_cpulist((0, 1, 2, 3, 8, 10, 11)) == "0-3,8,10-11"


def test_split_evenly_gives_disjoint_parts_covering_every_core():
    parts = split_evenly(list(range(10)), 3)
    assert parts == [(0, 1, 2, 3), (4, 5, 6), (7, 8, 9)]
    with pytest.raises(RunError, match="2 usable core"):
        split_evenly([0, 1], 3)


def test_cpu_slots_split_this_process_affinity():
    cores, note = usable_cores()
    plan = plan_slots(len(cores), use_gpus=False)
    assert [slot.cores for slot in plan.slots] == [(core,) for core in cores]
    assert note is None and all(slot.gpu_uuid is None for slot in plan.slots)


def test_cpu_auto_is_one_slot_of_every_core():
    plan = plan_slots("auto", use_gpus=False, cores=(0, 1, 2, 3))
    assert plan.slots == (Slot(0, (0, 1, 2, 3)),)


def test_topology_reads_cpu_and_numa_affinity_of_eight_gpus():
    places = parse_topology((DATA / "a100x8-topo.txt").read_text())
    assert sorted(places) == list(range(8))
    assert set(places[0].cpus) == NODE0 and places[0].numa_node == 0
    assert set(places[7].cpus) == NODE1 and places[7].numa_node == 1


def test_auto_on_eight_gpus_gives_each_gpu_cores_of_its_numa_node():
    plan = plan_slots("auto", use_gpus=True, run=smi(), cores=HOST_CORES, sysfs=Path("/nonexistent"))
    assert len(plan.slots) == 8 and plan.notes == ("NUMA affinity of the GPUs from nvidia-smi topo -m",)
    assert plan.slots[3].gpu_uuid == "GPU-3f3c2a1e-7b6d-4e5f-8a9b-0c1d2e3f4a53"
    for slot in plan.slots:
        assert set(slot.cores) <= (NODE0 if slot.gpu_index < 4 else NODE1)
        assert slot.numa_node == (0 if slot.gpu_index < 4 else 1)
        assert len(slot.cores) == 32
    every = [core for slot in plan.slots for core in slot.cores]
    assert sorted(every) == list(HOST_CORES)     # disjoint, and none left idle


def test_sysfs_bus_ids_are_nvidia_smis_in_the_kernels_spelling():
    assert sysfs_bus_id("00000000:1B:00.0") == "0000:1b:00.0"
    assert sysfs_bus_id("00000001:C3:00.0") == "0001:c3:00.0"
    assert parse_bus_ids((DATA / "h100x8-bus-id.csv").read_text())[4] == "00000000:9D:00.0"


def test_sysfs_numa_nodes_place_eight_h100s_without_topo():
    """The hand-written 2-socket 8x H100 sysfs: each GPU's numa_node, that node's cpulist; topo -m
    is never asked (its fake fails)."""
    run = smi(topo=None, gpus="h100x8-query-gpu.csv", bus_ids="h100x8-bus-id.csv")
    plan = plan_slots("auto", use_gpus=True, run=run, cores=range(224), sysfs=SYSFS)
    assert plan.notes == ("NUMA affinity of the GPUs from sysfs",)
    assert [s.numa_node for s in plan.slots] == [0, 0, 0, 0, 1, 1, 1, 1]
    for slot in plan.slots:
        assert set(slot.cores) <= (H100_NODE0 if slot.numa_node == 0 else H100_NODE1) and len(slot.cores) == 28
    assert sorted(core for slot in plan.slots for core in slot.cores) == list(range(224))


def test_unknown_sysfs_node_falls_back_to_topo(tmp_path):
    device = tmp_path / "bus" / "pci" / "devices" / "0000:1b:00.0"
    device.mkdir(parents=True)
    (device / "numa_node").write_text("-1\n")                   # the kernel's "no NUMA affinity known"
    plan = plan_slots(2, use_gpus=True, run=smi(bus_ids="h100x8-bus-id.csv"), cores=HOST_CORES, sysfs=tmp_path)
    assert plan.notes == ("NUMA affinity of the GPUs from nvidia-smi topo -m",)
    assert [s.numa_node for s in plan.slots] == [0, 0]


def test_gpu_choice_by_index_and_uuid_restricts_the_slots():
    plan = plan_slots("auto", use_gpus=True, gpu_choice=("0", "GPU-5f3c2a1e-7b6d-4e5f-8a9b-0c1d2e3f4a55"),
                      run=smi(), cores=HOST_CORES)
    assert [(s.index, s.gpu_index, s.numa_node) for s in plan.slots] == [(0, 0, 0), (1, 5, 1)]
    assert set(plan.slots[0].cores) == NODE0 and set(plan.slots[1].cores) == NODE1


def test_affinity_limits_the_cores_a_slot_gets():
    plan = plan_slots("auto", use_gpus=True, gpu_choice=("0", "1"), run=smi(), cores=range(0, 8))
    assert [s.cores for s in plan.slots] == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_unreadable_topology_splits_evenly_and_says_so():
    plan = plan_slots(2, use_gpus=True, run=smi(topo=None), cores=range(8))
    assert [s.cores for s in plan.slots] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [s.numa_node for s in plan.slots] == [None, None]
    assert len(plan.notes) == 1 and "split evenly" in plan.notes[0] and "split evenly" in plan.describe()


def test_unknown_gpu_and_too_many_slots_are_refused():
    with pytest.raises(RunError, match="no GPU 9"):
        plan_slots("auto", use_gpus=True, gpu_choice=("9",), run=smi(), cores=HOST_CORES)
    with pytest.raises(RunError, match="only 8 GPU"):
        plan_slots(9, use_gpus=True, run=smi(), cores=HOST_CORES)


def smi_apps(apps):
    base = smi()

    def run(argv):
        if argv[1].startswith("--query-compute-apps="):
            return 0, (DATA / apps).read_text() if apps else ""
        return base(argv)
    return run


def test_busy_gpus_of_a_slot_are_refused_unless_allowed():
    plan = plan_slots("auto", use_gpus=True, gpu_choice=("2", "3"), run=smi(), cores=HOST_CORES)
    with pytest.raises(RunError, match=r"1 other process.*51877.*--allow-busy-gpus"):
        check_gpus_free(plan, run=smi_apps("apps-busy.csv"))
    notes = []
    check_gpus_free(plan, allow=True, note=notes.append, run=smi_apps("apps-busy.csv"))
    assert "51877" in notes[0]


def test_processes_on_other_gpus_do_not_block_the_slots():
    plan = plan_slots("auto", use_gpus=True, gpu_choice=("1", "2"), run=smi(), cores=HOST_CORES)
    assert busy_gpu_apps(plan, run=smi_apps("apps-busy.csv")) == []
    check_gpus_free(plan, run=smi_apps(""))
