from ansible_collections.gpucluster.cluster.plugins.filter.diagnose import explain
from ansible_collections.gpucluster.cluster.plugins.filter.inventory import inventory_errors, provided_args
from ansible_collections.gpucluster.cluster.plugins.filter.multi_nic import cidr


def test_provided_args_are_only_what_the_user_set():
    values = {"docker_users": ["a"], "docker_data_root": "__gpucluster_unset__", "docker_log_max_file": 0}
    assert provided_args(values) == {"docker_users": ["a"], "docker_log_max_file": 0}


def test_inventory_errors_prefix_the_host():
    errs = inventory_errors({"training_image_ref": "a/b:1", "container_ssh_port": 22, "preflight_require_gpu": False},
                            "node-3", gpu_count=0)
    assert errs == ["node-3: container_ssh_port: 22 is the node's own sshd port; with host networking mpirun would "
                    "reach the node, not the container. Fix: use a port of its own, e.g. 2222."]


def test_gpu_less_node_without_opt_out_is_an_error():
    errs = inventory_errors({"training_image_ref": "a/b:1"}, "node-1", gpu_count=0)
    assert len(errs) == 1 and errs[0].startswith("node-1: preflight_require_gpu: no NVIDIA GPU found")


def test_cidr_of_the_default_ipv4_fact():
    assert cidr({"address": "172.18.0.3", "netmask": "255.255.0.0"}) == "172.18.0.0/16"


def test_explain_leads_with_a_known_diagnosis():
    out = explain("Host key verification failed.\r\n")
    assert "known_hosts" in out and "Fix:" in out
    assert explain("something else entirely") == "something else entirely"
