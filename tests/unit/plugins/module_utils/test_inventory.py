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


# --- Misspelt settings ---------------------------------------------------------------------
ROOT = __import__("pathlib").Path(__file__).resolve().parents[4]
OPTIONS, KNOWN, PREFIXES = inventory.load_known_settings(str(ROOT))


@pytest.mark.parametrize(("typo", "real"), [
    ("hugepage_count", "hugepages_count"),          # stage name misspelt (no role prefix at all)
    ("traning_image_ref", "training_image_ref"),    # a letter missing
    ("docker_daemon_option", "docker_daemon_options"),  # role prefix, option misspelt
    ("container_ssh_prot", "container_ssh_port"),
    ("nccl_env_extras", "nccl_env_extra"),
    ("nvidia_driver_versoin", "nvidia_driver_version"),
])
def test_a_misspelt_setting_is_refused_naming_the_real_one(typo, real):
    assert inventory.setting_suspects([typo, real], KNOWN, PREFIXES) == [typo]
    (p,) = inventory.check_setting_typos({typo: 4}, OPTIONS, PREFIXES)
    (msg,) = inventory.format_problems("node-2", [p])
    assert msg == (f"node-2: {typo}: is not a gpucluster setting (value 4); did you mean {real}. Fix: rename it to "
                   f"{real} (or remove it; a variable of your own by this name goes in preflight_ignore_variables).")


def test_a_prefixed_name_without_a_close_setting_is_refused_with_its_prefix():
    assert inventory.setting_suspects(["gpucluster_frobnicate"], KNOWN, PREFIXES) == ["gpucluster_frobnicate"]
    (p,) = inventory.check_setting_typos({"gpucluster_frobnicate": "yes"}, ["hugepages_count"], PREFIXES)
    assert "carries the prefix of one (gpucluster_)" in p.message and "'yes'" in p.message


def test_real_settings_ansible_names_and_unrelated_variables_pass():
    names = ["hugepages_count", "training_image_ref", "gpucluster_allow_reboot", "gpucluster_slots_per_node",
             "gpucluster_excluded_nodes", "gpucluster_reboot_timeout", "gpucluster_plan",
             "hugepages_reboot_required", "ansible_host", "ansible_facts", "inventory_hostname", "group_names",
             "groups", "omit", "playbook_dir", "__hugepages_plan", "http_proxy", "ntp_servers", "my_team"]
    assert inventory.setting_suspects(names, KNOWN, PREFIXES) == []


def test_a_variable_of_ones_own_can_be_let_through():
    assert inventory.setting_suspects(["docker_compose_projects"], KNOWN, PREFIXES) == ["docker_compose_projects"]
    assert inventory.setting_suspects(["docker_compose_projects"], KNOWN, PREFIXES,
                                      ignore=["docker_compose_projects"]) == []


def test_a_name_only_a_comment_mentions_is_not_known():
    known = inventory.known_settings(["hugepages_count"], ["# e.g. hugepage_count: 4\nx: \"{{ real_one }}\"\n",
                                                           "{# traning_image_ref #}{{ other }}"])
    assert "hugepage_count" not in known and "traning_image_ref" not in known
    assert {"real_one", "other", "x"} <= known


def test_the_sandbox_inventory_and_every_molecule_scenario_pass():
    import yaml

    from gpucluster import sandbox

    text = sandbox.SANDBOX_VARS.format(registry_ref="r:5000/a/b:1", registry="r:5000", user="u")
    names = list(yaml.safe_load(text))
    assert "preflight_require_gpu" in names
    for f in sorted(ROOT.glob("roles/*/molecule/*/converge.yml")):
        for play in yaml.safe_load(f.read_text()):
            names += [n for n in play.get("vars", {}) if not n.startswith("__")]
    assert inventory.setting_suspects(names, KNOWN, PREFIXES) == []


# --- every stage's argument spec in one pass (spec_problems) ---------------------------------
ROOT = __import__("pathlib").Path(__file__).resolve().parents[4]
ROLES = ("hugepages", "docker", "training_image", "container_ssh")


@pytest.mark.parametrize(("values", "variable", "fragments"), [
    ({"hugepages_count": "many"}, "hugepages_count",
     ["'many': refused by the hugepages stage", "Fix: give hugepages_count a whole number"]),
    ({"docker_package_source": "snap"}, "docker_package_source",
     ["'snap'", "Fix: give docker_package_source one of distro, docker"]),
    ({"training_image_privileged": "maybe"}, "training_image_privileged", ["'maybe'", "true or false"]),
])
def test_a_spec_refusal_names_variable_value_and_fix(values, variable, fragments):
    specs = inventory.load_role_specs(str(ROOT), ROLES)
    (problem,) = inventory.spec_problems({"training_image_ref": "registry.example.com/t:1", **values}, specs)
    assert problem.variable == variable
    (msg,) = inventory.format_problems("node-3", [problem])
    assert msg.startswith(f"node-3: {variable}: ")
    for fragment in fragments:
        assert fragment in msg, msg


def test_values_the_specs_accept_pass_and_names_of_no_spec_are_not_judged():
    specs = inventory.load_role_specs(str(ROOT), ROLES)
    assert inventory.spec_problems({"hugepages_count": "4", "docker_package_source": "docker",
                                    "training_image_ref": "registry.example.com/t:1",
                                    "training_image_capabilities": ["SYS_PTRACE"], "not_a_setting": {}}, specs) == []


def test_a_secret_refused_by_its_spec_is_not_echoed():
    specs = {"training_image": {"training_image_registry_password": {"type": "int", "no_log": True,
                                                                     "description": "A number"}}}
    (problem,) = inventory.spec_problems({"training_image_registry_password": "hunter2"}, specs)
    assert "hunter2" not in problem.message + problem.fix and "a secret, not shown" in problem.message


def test_a_required_setting_left_unset_is_named_as_not_set():
    specs = inventory.load_role_specs(str(ROOT), ("training_image",))
    (problem,) = inventory.spec_problems({}, specs)
    assert problem.variable == "training_image_ref" and problem.message.startswith("not set: ")


def test_the_unset_marker_has_one_python_spelling_and_preflight_uses_it():
    import yaml

    marker = yaml.safe_load((ROOT / "roles/preflight/vars/main.yml").read_text())["__preflight_unset"]
    assert marker == inventory.UNSET
    texts = [p.read_text() for p in (ROOT / "plugins").rglob("*.py")]
    assert sum(t.count(repr(inventory.UNSET)[1:-1]) for t in texts) == 1
