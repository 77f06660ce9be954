import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils import inventory


@pytest.mark.parametrize(
    ("ref", "domain", "path", "tag"),
    [
        ("ubuntu", None, "ubuntu", None),
        ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io", "nvidia/pytorch", "24.01-py3"),
        ("gpucluster-infra:5000/gpucluster/train-cpu:806523e5d567", "gpucluster-infra:5000",
         "gpucluster/train-cpu", "806523e5d567"),
        ("localhost/x", "localhost", "x", None),
        ("library/ubuntu:22.04", None, "library/ubuntu", "22.04"),
    ],
)
def test_image_refs_parse(ref, domain, path, tag):
    assert inventory.parse_image_ref(ref)[:3] == (domain, path, tag)


def test_digest_ref_parses():
    ref = "registry.example.com/team/train@sha256:" + "a" * 64
    assert inventory.parse_image_ref(ref)[3] == "sha256:" + "a" * 64


@pytest.mark.parametrize("ref", ["", "Not::A/Ref", "UPPER/case", "a//b", "x:", "with space"])
def test_bad_image_refs_are_refused(ref):
    with pytest.raises(ValueError):
        inventory.parse_image_ref(ref)


def test_training_image_problems_name_variable_and_fix():
    probs = inventory.check_training_image("Not::A/Ref", "lots", "x", True)
    assert [p.variable for p in probs] == [
        "training_image_ref", "training_image_shm_size", "training_image_ulimit_memlock"]
    msgs = inventory.format_problems("node-2", probs)
    assert msgs[1] == ("node-2: training_image_shm_size: 'lots' is not a size. "
                       "Fix: use a number of bytes with an optional b/k/m/g unit, e.g. 32g.")


@pytest.mark.parametrize("shm", ["32g", "1024", "512m", "1.5G"])
def test_good_shm_sizes(shm):
    assert inventory.check_training_image("a/b:1", shm, -1, True) == []


def test_bounded_memlock_is_refused_on_an_rdma_node():
    # fixtures/mpi-containers/C36: 64 KiB memlock -> ibv_create_cq ENOMEM
    probs = inventory.check_training_image("a/b:1", "32g", 65536, False, rdma_devices=2)
    assert probs and probs[0].variable == "training_image_ulimit_memlock"
    assert "Cannot allocate memory" in probs[0].message
    # ...but is a stated limit on a node without RDMA (the sandbox)
    assert inventory.check_training_image("a/b:1", "32g", 8388608, False, rdma_devices=0) == []


@pytest.mark.parametrize(
    ("port", "mode", "expect"),
    [
        (2222, "host", None),
        (70000, "host", "out of range"),
        (0, "host", "out of range"),
        ("two", "host", "not a port number"),
        (22, "host", "node's own sshd port"),  # fixtures/mpi-containers/C34
        (22, "bridge", None),
    ],
)
def test_ssh_port(port, mode, expect):
    probs = inventory.check_ssh_port(port, mode)
    if expect is None:
        assert probs == []
    else:
        assert len(probs) == 1 and expect in probs[0].message and probs[0].variable == "container_ssh_port"


def test_gpu_less_node_needs_an_explicit_opt_out():
    assert inventory.check_gpus(0, True)[0].variable == "preflight_require_gpu"
    assert inventory.check_gpus(0, False) == []
    assert inventory.check_gpus(8, True) == []
    # -e preflight_require_gpu=false is a string on the command line
    assert inventory.check_gpus(0, "false") == []
    assert inventory.check_gpus(0, "yes")[0].variable == "preflight_require_gpu"
    assert inventory.check_gpus(8, "maybe")[0].message == "'maybe' is not a boolean"
