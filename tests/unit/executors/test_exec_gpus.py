from taugrid.executors.local.gpus import (
    DeclaredGpus,
    Gpu,
    gpus_of_type,
    machine_cpus_millis,
    machine_memory_bytes,
    probe_gpus,
    short_gpu_type,
)


def test_short_gpu_types() -> None:
    assert short_gpu_type("NVIDIA H100 80GB HBM3") == "h100"
    assert short_gpu_type("NVIDIA H200") == "h200"
    assert short_gpu_type("NVIDIA A100-SXM4-80GB") == "a100"
    assert short_gpu_type("Tesla V100-SXM2-16GB") == "v100"
    assert short_gpu_type("NVIDIA GeForce RTX 4090") == "rtx-4090"


def test_declared_gpus_win_and_cover_every_type() -> None:
    gpus = probe_gpus(3)
    assert [g.index for g in gpus] == [0, 1, 2] and gpus == DeclaredGpus(3).gpus()
    assert gpus_of_type(gpus, "h100") == gpus


def test_gpus_of_type_matches_model_names() -> None:
    gpus = [Gpu(0, "u0", "NVIDIA H100 80GB HBM3"), Gpu(1, "u1", "NVIDIA A100-SXM4-80GB")]
    assert [g.index for g in gpus_of_type(gpus, "h100")] == [0]
    assert [g.index for g in gpus_of_type(gpus, "A100")] == [1]
    assert gpus_of_type(gpus, None) == gpus


def test_machine_resources_are_positive() -> None:
    assert machine_cpus_millis() >= 1000 and machine_cpus_millis() % 1000 == 0
    assert machine_memory_bytes() > 2**28
