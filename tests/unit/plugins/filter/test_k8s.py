"""Node labels for Kubernetes from the gpu_facts facts (topology parsed from the real
``nvidia-smi topo -m`` outputs in tests/fixtures/nvidia-smi-topo)."""

from __future__ import annotations

import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.cluster.plugins.filter import k8s
from ansible_collections.gpucluster.cluster.plugins.module_utils.gpu_topology import parse_topo_matrix

from tests.conftest import fixture_text

C02 = "nvidia-smi-topo/C02_topo_a100_nvswitch_roce_nic_legend.txt"
C04 = "nvidia-smi-topo/C04_topo_2gpu_tabs_gpu_numa_id_na_plus_p2p.1-nvidia-smi-topo-m.txt"
# Kubernetes label value syntax (apimachinery validation.IsValidLabelValue).
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def fact(topo_fixture=None, names=("NVIDIA A100-SXM4-80GB",) * 8, pci_only=False):
    gpus = [{"index": i, "name": n} for i, n in enumerate(names)]
    return {
        "gpus": [] if pci_only else gpus,
        "gpu_count": 0 if pci_only else len(gpus),
        "pci_gpus": [{"name": "GA100 [A100 SXM4 80GB]"} for _ in names],
        "pci_gpu_count": len(names),
        "topology": parse_topo_matrix(fixture_text(topo_fixture)) if topo_fixture else None,
    }


def test_a100_nvswitch_node():
    labels = k8s.k8s_node_labels(fact(C02))
    assert labels == {
        "gpucluster.io/gpu-count": "8",
        "gpucluster.io/gpu-model": "NVIDIA-A100-SXM4-80GB",
        "gpucluster.io/nvlink": "true",
        "gpucluster.io/gpu-topology": "nvswitch",
        "ack.node.gpu.schedule": "topology",
    }


def test_two_gpu_node_from_its_topology():
    topo = parse_topo_matrix(fixture_text(C04))
    labels = k8s.k8s_node_labels(fact(C04, names=("NVIDIA GeForce RTX 3090",) * 2), "example.com")
    assert labels["example.com/gpu-count"] == "2"
    assert labels["example.com/nvlink"] == ("true" if topo["nvlink"] else "false")
    assert labels["example.com/gpu-topology"] == ("nvlink" if topo["nvlink"] else "pcie")


def test_driver_not_loaded_falls_back_to_pci_and_unknown_topology():
    labels = k8s.k8s_node_labels(fact(pci_only=True), ack_topology=False)
    assert labels == {"gpucluster.io/gpu-count": "8", "gpucluster.io/gpu-model": "GA100-A100-SXM4-80GB",
                      "gpucluster.io/nvlink": "unknown", "gpucluster.io/gpu-topology": "unknown"}


def test_mixed_models_single_gpu_and_no_gpu():
    assert k8s.k8s_node_labels(fact(names=("A", "B")))["gpucluster.io/gpu-model"] == "mixed"
    assert "ack.node.gpu.schedule" not in k8s.k8s_node_labels(fact(names=("NVIDIA T4",)))
    assert k8s.k8s_node_labels({"gpus": [], "gpu_count": 0, "pci_gpus": [], "pci_gpu_count": 0}) == {}
    assert k8s.k8s_node_labels(None) == {}


@pytest.mark.parametrize("text", ["NVIDIA A100-SXM4-80GB", "GA100 [A100 SXM4 80GB]", "  weird//name__", "x" * 80, ""])
def test_label_values_are_valid(text):
    value = k8s.label_value(text)
    assert LABEL_VALUE.match(value) and len(value) <= 63


def test_bad_prefix():
    with pytest.raises(AnsibleFilterError, match="DNS subdomain"):
        k8s.k8s_node_labels(fact(), "Not_A_Prefix")
