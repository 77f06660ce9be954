"""The stages' settings checked against the node before any change (module_utils/stage_settings.py),
and the registry values of daemon.json as dockerd reads them (module_utils/daemon_json.py)."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.filter.inventory import inventory_errors
from ansible_collections.gpucluster.cluster.plugins.module_utils import daemon_json, stage_settings

# ansible_facts of a node with a primary NIC (default route) and one data NIC without an address yet.
FACTS = {
    "interfaces": ["lo", "eth0", "ens1f0", "docker0"],
    "default_ipv4": {"interface": "eth0", "address": "192.0.2.10"},
    "lo": {"device": "lo", "active": True, "type": "loopback", "macaddress": "00:00:00:00:00:00",
           "ipv4": {"address": "127.0.0.1", "netmask": "255.0.0.0"}},
    "eth0": {"device": "eth0", "active": True, "type": "ether", "macaddress": "52:54:00:00:00:01",
             "ipv4": {"address": "192.0.2.10", "netmask": "255.255.255.0"}},
    "ens1f0": {"device": "ens1f0", "active": True, "type": "ether", "macaddress": "52:54:00:00:00:02",
               "ipv4": {"address": "198.18.0.10", "netmask": "255.255.255.0"}},
    "docker0": {"device": "docker0", "active": False, "type": "bridge", "macaddress": "02:42:00:00:00:01",
                "ipv4": {"address": "172.17.0.1", "netmask": "255.255.0.0"}},
}


def _vars(problems):
    return [p.variable for p in problems]


@pytest.mark.parametrize("caps", [[], ["SYS_PTRACE"], ["cap_ipc_lock", "NET_ADMIN"], ["ALL"],
                                  ["CAP_CHECKPOINT_RESTORE"]])
def test_capability_names_of_capabilities_7_pass(caps):
    assert stage_settings.check_capabilities(caps) == []


@pytest.mark.parametrize("caps", [["CAP_NOPE"], ["SYS_PTRACE", "SYS_PTRACEE"], ["--privileged"], "SYS_PTRACE"])
def test_unknown_capabilities_are_refused_naming_each(caps):
    (problem,) = stage_settings.check_capabilities(caps)
    assert problem.variable == "training_image_capabilities"
    if isinstance(caps, list):
        bad = [c for c in caps if c not in ("SYS_PTRACE",)]
        assert all(repr(b) in problem.message for b in bad)
        assert "SYS_PTRACE'" not in problem.message.replace("SYS_PTRACEE'", "")
    assert problem.fix


def test_the_capability_list_is_capabilities_7():
    # 41 capabilities since Linux 5.9; numbers are positions (CAP_SYS_ADMIN is 21, CAP_BPF 39).
    assert len(stage_settings.CAPABILITIES) == 41
    assert stage_settings.CAPABILITIES.index("SYS_ADMIN") == 21
    assert stage_settings.CAPABILITIES.index("BPF") == 39


@pytest.mark.parametrize(("user", "password", "bad"), [
    ("", "", []),
    ("ci", "s3cret", []),
    ("ci", "", ["training_image_registry_password"]),
    ("ci", None, ["training_image_registry_password"]),
    ("", "s3cret", ["training_image_registry_username"]),
])
def test_registry_login_needs_both_halves(user, password, bad):
    problems = stage_settings.check_registry_login(user, password)
    assert _vars(problems) == bad
    # the secret itself is never echoed
    assert all("s3cret" not in p.message for p in problems)


@pytest.mark.parametrize(("mode", "gpus", "bad"), [
    ("required", 0, True), ("required", 8, False), ("auto", 0, False), ("off", 0, False)])
def test_gpudirect_required_needs_a_gpu(mode, gpus, bad):
    assert bool(stage_settings.check_gpudirect_mode(mode, gpus)) is bad


@pytest.mark.parametrize(("value", "fragment"), [
    (["^docker0"], "NCCL_SOCKET_IFNAME syntax"),
    (["=ens1f0"], "NCCL_SOCKET_IFNAME syntax"),
    (["ens1f0,ens2f0"], "NCCL_SOCKET_IFNAME syntax"),
    (["lo"], "never carries"),
    (["docker0"], "never carries"),
    (["ens9"], "'ens9' is not on this node (its NICs: docker0, ens1f0, eth0, lo)"),
    ("ens1f0", "not a list"),
])
def test_bad_data_interfaces_are_refused(value, fragment):
    problems = stage_settings.check_data_interfaces(value, stage_settings.node_nic_names(FACTS))
    assert len(problems) == 1 and fragment in problems[0].message, problems


def test_good_data_interfaces_pass_and_a_nic_to_come_is_not_judged():
    nics = stage_settings.node_nic_names(FACTS)
    assert stage_settings.check_data_interfaces(["ens1f0"], nics) == []
    assert stage_settings.check_data_interfaces([], nics) == []
    # a cloud ENI attached by this run is not there yet: its name is not judged, its syntax is
    assert stage_settings.check_data_interfaces(["eth1"], nics, nics_may_appear=True) == []
    assert stage_settings.check_data_interfaces(["^eth1"], nics, nics_may_appear=True)


@pytest.mark.parametrize(("extra", "fragment"), [
    ({"NCCL_SOCKET_IFNAME": "^docker0"}, "NCCL may pick lo"),
    ({"NCCL_SOCKET_IFNAME": "lo"}, "never carries NCCL traffic"),
    ({"NCCL DEBUG": "INFO"}, "not an environment variable name"),
    ({"NCCL_IB_HCA": ["mlx5_0"]}, "not a single value"),
    (["NCCL_DEBUG=INFO"], "not a mapping"),
])
def test_bad_nccl_extra_is_refused(extra, fragment):
    problems = stage_settings.check_nccl_extra(extra)
    assert problems and fragment in problems[0].message and problems[0].variable == "nccl_env_extra"


def test_good_nccl_extra_passes():
    assert stage_settings.check_nccl_extra({"NCCL_DEBUG": "INFO", "NCCL_IB_TIMEOUT": 22,
                                            "NCCL_SOCKET_IFNAME": "=ens1f0"}) == []


@pytest.mark.parametrize(("specs", "fragment"), [
    ([{"name": "ens9"}], "interface ens9 is not on this node"),
    ([{"mac": "52:54:00:00:00:99"}], "no interface with MAC 52:54:00:00:00:99"),
    ([{"name": "eth0"}], "eth0"),  # the primary NIC, which holds the default route
])
def test_secondary_nics_are_resolved_as_the_stage_resolves_them(specs, fragment):
    (problem,) = stage_settings.check_secondary_nics(specs, FACTS)
    assert problem.variable.startswith("multi_nic_interfaces")
    assert fragment in problem.message


def test_secondary_nics_that_resolve_pass_and_enis_to_come_are_left_to_the_stage():
    assert stage_settings.check_secondary_nics([{"mac": "52:54:00:00:00:02"}], FACTS) == []
    assert stage_settings.check_secondary_nics([{"mac": "52:54:00:00:00:99"}], FACTS, nics_may_appear=True) == []


def test_the_filter_names_host_variable_value_and_fix():
    msgs = inventory_errors({"training_image_ref": "registry.example.com:5000/t:1", "preflight_require_gpu": False,
                             "nccl_env_extra": {"NCCL_SOCKET_IFNAME": "^docker0"},
                             "training_image_capabilities": ["CAP_NOPE"]}, "node-2", facts=FACTS)
    assert len(msgs) == 2
    assert all(m.startswith("node-2: ") and ". Fix: " in m for m in msgs)
    assert any("nccl_env_extra: NCCL_SOCKET_IFNAME=^docker0" in m for m in msgs)
    assert any("training_image_capabilities: 'CAP_NOPE'" in m for m in msgs)


def test_only_what_the_user_set_is_checked():
    # the roles' defaults are valid by construction; nothing unset is judged
    assert inventory_errors({"training_image_ref": "registry.example.com:5000/t:1", "preflight_require_gpu": False},
                            "node-1", facts=FACTS) == []
    # with cloud ENIs coming, names and MACs on the node are not judged yet
    assert inventory_errors({"training_image_ref": "registry.example.com:5000/t:1", "preflight_require_gpu": False,
                             "cloud_eni_provider": "aws", "multi_nic_interfaces": [{"mac": "0a:00:00:00:00:09"}],
                             "nccl_env_data_interfaces": ["eth1"]}, "node-1", facts=FACTS) == []


# --- daemon.json registry values (moby registry/config.go and its TestLoadInsecureRegistries) ----

@pytest.mark.parametrize("value", [
    "127.0.0.1", "127.0.0.1:8080", "2001:db8::1", "[2001:db8::1]:80", "http://mytest.com", "https://mytest.com",
    "HTTP://mytest.com", "gpucluster-infra:5000", "10.0.0.0/8", "2001:db8::/120", "registry.example.com"])
def test_insecure_registries_dockerd_accepts(value):
    assert daemon_json.registry_problem("insecure-registries", value) is None


@pytest.mark.parametrize(("value", "fragment"), [
    ("svn://mytest.com", "should not contain '://'"),
    ("-invalid-registry", "hyphen"),
    ("mytest-.com", 'invalid host "mytest-.com"'),
    ("1200:0000:AB00:1234:0000:2552:7777:1313:8080", "invalid host"),
    ("mytest.com:500000", 'invalid port "500000"'),
    ('"mytest.com"', "invalid host"),
    ("http://bad reg:5000", 'invalid host "bad reg"'),
])
def test_insecure_registries_dockerd_refuses(value, fragment):
    why = daemon_json.registry_problem("insecure-registries", value)
    assert why and fragment in why and "Fix:" in why


@pytest.mark.parametrize(("value", "ok"), [
    ("https://mirror.example.com", True), ("http://10.0.0.5:5000/", True), ("mirror.example.com", False),
    ("https://mirror.example.com/v2", False), ("https://u:p@mirror.example.com", False),
    ("ftp://m.example.com", False)])
def test_registry_mirrors_as_validate_mirror_reads_them(value, ok):
    assert (daemon_json.registry_problem("registry-mirrors", value) is None) is ok


def test_plan_problems_name_the_owner_of_each_value_and_the_json_type():
    problems = daemon_json.plan_problems([("docker role", {"data-root": "/srv/docker"}),
                                          ("docker_daemon_options", {"data-root": "/data/docker"})])
    assert len(problems) == 1 and "'docker role'" in problems[0] and "'docker_daemon_options'" in problems[0]
    (typed,) = daemon_json.plan_problems([("docker_daemon_options", {"live-restore": "yes"})])
    assert '"yes" (string)' in typed and "true or false" in typed
    (reg,) = daemon_json.plan_problems([("docker_daemon_options", {"insecure-registries": ["a b:1"]})])
    assert "insecure-registries" in reg
    good = [("docker role", {"log-driver": "json-file", "log-opts": {"max-file": "3"}}),
            ("docker_daemon_options", {"insecure-registries": ["gpucluster-infra:5000"]})]
    assert daemon_json.plan_problems(good) == []


@pytest.mark.parametrize(("values", "variable", "fragment"), [
    ({"nccl_env_socket_nthreads": 32}, "nccl_env_socket_nthreads", "must be 1-16, got 32"),
    ({"nccl_env_socket_nthreads": 8, "nccl_env_nsocks_perthread": 16}, "nccl_env_socket_nthreads", "8 x 16 = 128"),
    ({"nccl_env_net_plugin": "harp plugin"}, "nccl_env_net_plugin", "plugin name or library path"),
    ({"nccl_env_gdr_level": "FAST"}, "nccl_env_gdr_level", "must be one of LOC"),
])
def test_nccl_values_are_checked_by_the_stages_own_rule(values, variable, fragment):
    (problem,) = stage_settings.check_nccl_values(values)
    assert problem.variable == variable and fragment in problem.message


def test_nccl_values_the_stage_accepts_pass():
    assert stage_settings.check_nccl_values({"nccl_env_socket_nthreads": 4, "nccl_env_nsocks_perthread": 4,
                                             "nccl_env_gdr_level": "PHB", "nccl_env_net_plugin": "harp"}) == []
    assert stage_settings.check_nccl_values({"nccl_env_socket_nthreads": 0, "nccl_env_gdr_level": ""}) == []


@pytest.mark.parametrize(("opts", "fragment"), [
    ({"max-size": "lots"}, "'log-opts.max-size' is \"lots\", not a size"),
    ({"max-size": "100m", "max-file": "0"}, "'log-opts.max-file' is \"0\""),
    ({"max-size": "100m", "max-sise": "1g"}, "'log-opts.max-sise' is not an option of the json-file log driver"),
    ({"compress": "maybe"}, "not true or false"),
])
def test_log_opts_every_container_would_fail_on_are_refused(opts, fragment):
    (problem,) = daemon_json.plan_problems([("docker_daemon_options", {"log-driver": "json-file", "log-opts": opts})])
    assert fragment in problem and "Fix:" in problem


@pytest.mark.parametrize("opts", [{"max-size": "100m", "max-file": "3"}, {"max-size": "1.5 GiB"}, {"max-size": "10k"},
                                  {"labels": "team", "tag": "{{.Name}}", "compress": "true"}])
def test_log_opts_docker_reads_pass(opts):
    assert daemon_json.plan_problems([("docker_daemon_options", {"log-opts": opts})]) == []
    # a driver whose options are not known here is not judged
    fluentd = {"log-driver": "fluentd", "log-opts": {"fluentd-address": "h:24224"}}
    assert daemon_json.plan_problems([("x", fluentd)]) == []


@pytest.mark.parametrize(("probe", "wanted", "refused"), [
    ("/var/lib/docker 3 5 0", "/srv/docker", True),      # containers and images would vanish
    ("/var/lib/docker 0 1 0", "/srv/docker", True),      # an image alone is data too
    ("/var/lib/docker 0 0 0", "/srv/docker", False),     # an empty engine loses nothing
    ("/srv/docker 3 5 1", "/srv/docker/", False),        # already there
    ("/var/lib/docker 3 5 1", "/srv/docker", False),     # the data was copied to the new root on purpose
    ("", "/srv/docker", False),                          # no engine yet (a fresh node)
    ("/var/lib/docker 3 5 0", "", False),                # no data-root asked for
])
def test_a_data_root_that_would_hide_the_engines_data_is_refused(probe, wanted, refused):
    why = daemon_json.root_move_problem(probe, wanted)
    assert bool(why) is refused
    if refused:
        assert "/var/lib/docker" in why and "Fix:" in why and "rsync -aHX /var/lib/docker/ /srv/docker/" in why


# --- settings whose type is right but whose value a later stage refuses or breaks the node with ---
# (found by trying one bad setting at a time through gpucluster plan)
@pytest.mark.parametrize(("values", "variable", "fragment"), [
    ({"docker_apt_mirror": "download.docker.com/linux"}, "docker_apt_mirror", "is not a http/https URL"),
    ({"nccl_net_plugin_url": "s3://bucket/libnccl-net.so"}, "nccl_net_plugin_url", "http/https/ftp/file URL"),
    ({"nvidia_driver_cuda_repo_url": "developer.download.nvidia.com/x"}, "nvidia_driver_cuda_repo_url", "URL"),
    ({"training_image_tools_dir": "opt/gpucluster/tools"}, "training_image_tools_dir", "relative path"),
    ({"container_ssh_dir": "etc/ssh"}, "container_ssh_dir", "relative path"),
    ({"hugepages_sysctl_file": "/etc/sysctl.d/60-hugepages"}, "hugepages_sysctl_file", "does not end in .conf"),
    ({"hugepages_grub_dropin": "/etc/default/grub"}, "hugepages_grub_dropin", "grub-mkconfig reads"),
    ({"hugepages_grub_dropin": "/etc/default/grub.d/99-x.conf"}, "hugepages_grub_dropin", ".cfg"),
    ({"training_image_container_name": "gpu cluster"}, "training_image_container_name", "not a Docker container name"),
    ({"training_image_gpus": "gpu0"}, "training_image_gpus", "'gpu0' is no GPU index"),
    ({"training_image_gpus": "0-7"}, "training_image_gpus", "no GPU index"),
    ({"training_image_gpu_request": "CDI"}, "training_image_gpu_request", "is not one of cdi, legacy"),
    ({"training_image_shm_size": "0"}, "training_image_shm_size", "64 MiB"),
    ({"training_image_ulimit_stack": 0}, "training_image_ulimit_stack", "cannot run sshd"),
    ({"training_image_env": {"NCCL_IB_TIMEOUT": 22}}, "training_image_env", "is not a string"),
    ({"training_image_env": {"MY-VAR": "1"}}, "training_image_env", "not an environment variable name"),
    ({"training_image_extra_volumes": ["/data:data"]}, "training_image_extra_volumes[0]", "SRC:/absolute"),
    ({"training_image_extra_volumes": ["/data:/data:rx"]}, "training_image_extra_volumes[0]", "mode Docker does not"),
    ({"multi_nic_table_base": 254}, "multi_nic_table_base", "reserved table 254"),
    ({"multi_nic_table_base": 240}, "multi_nic_table_base", "reserved table 253"),
    ({"multi_nic_rule_priority": 40000}, "multi_nic_rule_priority", "after the main table's"),
    ({"container_ssh_slots": 0}, "container_ssh_slots", "not a positive number"),
    ({"gpucluster_reboot_timeout": 0}, "gpucluster_reboot_timeout", "not a positive number"),
    ({"node_health_ecc_corrected_limit": -1}, "node_health_ecc_corrected_limit", "negative"),
    ({"nccl_env_hcas": ["mlx5_0:x"]}, "nccl_env_hcas", "not an HCA name"),
    ({"nccl_net_plugin_setup_success": "setup ok ("}, "nccl_net_plugin_setup_success", "not a regular expression"),
    ({"multi_nic_interfaces": [{"name": "ens1f0", "mtu": 100000}]}, "multi_nic_interfaces[0]", "MTU 100000"),
    ({"multi_nic_mtu": 100000, "multi_nic_interfaces": [{"name": "ens1f0"}]}, "multi_nic_mtu", "outside 68-65535"),
    ({"hugepages_mount_options": ["nosuid", "gid=hugetlb"]}, "hugepages_mount_options", "numeric gid"),
    ({"container_ssh_user": "mpi user"}, "container_ssh_user", "not a user name"),
    ({"multi_nic_mtu": 100000}, "multi_nic_mtu", "outside 68-65535"),
    ({"multi_nic_networkd_prefix": "10 gpu/cluster"}, "multi_nic_networkd_prefix", "not a file-name prefix"),
    ({"hugepages_mount_options": ["mode=rwx"]}, "hugepages_mount_options", "not an octal mode"),
    ({"nvidia_container_toolkit_cdi_spec": "/opt/cdi/nvidia.yaml"}, "nvidia_container_toolkit_cdi_spec",
     "outside the directories Docker reads"),
    ({"training_image_command": []}, "training_image_command", "the image's own command"),
    ({"training_image_ssh_dir": "/srv/ssh"}, "training_image_ssh_dir", "container_ssh_dir's default"),
    ({"training_image_ssh_dir": "/srv/ssh", "container_ssh_dir": "/opt/ssh"}, "training_image_ssh_dir",
     "('/opt/ssh', container_ssh_dir)"),
    ({"training_image_command": ""}, "training_image_command", "'' is no command"),
    ({"training_image_command": None}, "training_image_command", "None is no command"),
    ({"training_image_command": [""]}, "training_image_command", "has an empty word"),
    ({"training_image_command": ["/usr/sbin/sshd", " "]}, "training_image_command", "has an empty word"),
    ({"nccl_env_conf_path": ""}, "nccl_env_conf_path", "'' is not a file NCCL reads"),
    ({"nccl_env_conf_path": None}, "nccl_env_conf_path", "None is not a file NCCL reads"),
    ({"nccl_env_conf_path": "/etc/.nccl.conf"}, "nccl_env_conf_path", "not a file NCCL reads"),
    ({"nccl_env_conf_path": "/tmp/.nccl.conf"}, "nccl_env_conf_path", "not a file NCCL reads"),
    ({"nccl_env_conf_path": "/etc/gpucluster/nccl.conf",
      "nccl_env_extra": {"NCCL_CONF_FILE": "/etc/gpucluster/nccl.conf"}}, "nccl_env_conf_path", "not a file NCCL"),
    ({"training_image_gpu_request": None}, "training_image_gpu_request", "None is not one of cdi, legacy"),
    ({"nccl_env_conf_path": "/etc/gpucluster/nccl.conf"}, "nccl_env_conf_path", "not a file NCCL reads"),
    ({"nccl_env_conf_path": "/etc/nccl.conf.d/10.conf", "nccl_env_extra": {"NCCL_CONF_FILE": "/etc/nccl2.conf"}},
     "nccl_env_conf_path", "not a file NCCL reads"),
    ({"nccl_env_conf_path": "/root/nccl.conf"}, "nccl_env_conf_path", "'/root/nccl.conf' is not a file NCCL"),
])
def test_a_value_a_later_stage_would_refuse_or_break_on_is_refused_now(values, variable, fragment):
    problems = stage_settings.stage_problems(values, FACTS, gpus=8)
    assert [p.variable for p in problems] == [variable], problems
    assert fragment in problems[0].message, problems[0].message
    assert problems[0].fix


@pytest.mark.parametrize("values", [
    {"docker_apt_mirror": "https://download.docker.com/linux", "nccl_net_plugin_url": "file:///srv/libnccl-net.so"},
    {"training_image_tools_dir": "/opt/gpucluster/tools", "hugepages_sysctl_file": "/etc/sysctl.d/60-hp.conf",
     "hugepages_grub_dropin": "/etc/default/grub.d/60-gpucluster-hugepages.cfg", "docker_log_max_file": 3},
    {"training_image_container_name": "gpucluster-train", "training_image_gpus": "0,1",
     "training_image_gpu_request": "cdi", "training_image_shm_size": "32g", "training_image_ulimit_stack": 67108864,
     "training_image_env": {"NCCL_DEBUG": "INFO"}, "training_image_extra_volumes": ["/data:/data:ro", "ckpt:/ckpt"]},
    {"training_image_gpus": "", "training_image_ulimit_stack": -1},
    {"multi_nic_table_base": 100, "multi_nic_rule_priority": 1000, "container_ssh_slots": 4,
     "gpucluster_reboot_timeout": 900, "node_health_ecc_corrected_limit": 0, "nccl_env_hcas": ["mlx5_0:1", "mlx5_1"],
     "nccl_net_plugin_setup_success": "setup (ok|done)"},
    {"hugepages_mount_options": ["nosuid", "nodev", "gid=1001", "mode=1770"], "container_ssh_user": "root",
     "multi_nic_networkd_prefix": "10-gpucluster",
     "nvidia_container_toolkit_cdi_spec": "/etc/cdi/nvidia.yaml"},
    {"nvidia_container_toolkit_cdi_spec": "/opt/cdi/nvidia.yaml",
     "docker_daemon_options": {"cdi-spec-dirs": ["/opt/cdi"]}},
    {"training_image_command": ["/usr/sbin/sshd", "-D"], "nccl_env_conf_path": "/etc/nccl.conf"},
    {"nccl_env_conf_path": "/home/trainer/.nccl.conf"},
    {"container_ssh_dir": "/srv/ssh", "container_ssh_hostfile": "/srv/mpi/hostfile"},
    {"container_ssh_dir": "/srv/ssh", "training_image_ssh_dir": "/srv/ssh"},
    {"nccl_env_conf_path": "/etc//nccl.conf"}, {"nccl_env_conf_path": "/root/.nccl.conf"},
    {"training_image_command": "/usr/sbin/sshd -D -e"},
    {"container_ssh_dir": "/srv/ssh/", "training_image_ssh_dir": "/srv/ssh"},
])
def test_values_the_stages_take_pass(values):
    assert stage_settings.stage_problems(values, FACTS, gpus=8) == []


@pytest.mark.parametrize(("driver", "refused"), [("jsonfile", True), ("json-file", False), ("journald", False),
                                                 ("splunk/logging:1.0", False), ("nosuch", True)])
def test_log_drivers_dockerd_has(driver, refused):
    problems = daemon_json.plan_problems([("docker role", {"log-driver": driver})])
    assert bool(problems) is refused
    if driver == "jsonfile":
        assert "Did you mean 'json-file'" in problems[0]


@pytest.mark.parametrize(("cfg", "refused"), [
    ({"bip": "172.26.0.1"}, True), ({"bip": "172.26.0.1/16"}, False), ({"fixed-cidr": "10.0.0.0"}, True),
    ({"default-address-pools": [{"base": "10.203.0.0/16", "size": 24}]}, False),
    ({"default-address-pools": [{"base": "10.203.0.0", "size": 24}]}, True),
])
def test_bridge_addresses_dockerd_parses_as_cidr(cfg, refused):
    assert bool(daemon_json.plan_problems([("docker_daemon_options", cfg)])) is refused


AWS = {"cloud_eni_provider": "aws", "cloud_eni_region": "us-east-1", "cloud_eni_instance_id": "i-0123456789abcdef0",
       "cloud_eni_subnet_id": "subnet-0123abcd", "cloud_eni_subnet_cidr": "10.0.64.0/20",
       "cloud_eni_security_groups": ["sg-0123abcd"]}
TENCENT = {"cloud_eni_provider": "tencentcloud", "cloud_eni_region": "ap-guangzhou",
           "cloud_eni_instance_id": "ins-abcd1234",
           "cloud_eni_subnet_id": "subnet-abcd1234", "cloud_eni_subnet_cidr": "10.0.64.0/20",
           "cloud_eni_security_groups": ["sg-abcd1234"]}


@pytest.mark.parametrize(("base", "change", "variable", "fragment"), [
    (AWS, {"cloud_eni_region": "us-east1"}, "cloud_eni_region", "not aws's form of a region"),
    (AWS, {"cloud_eni_instance_id": "ins-abcd1234"}, "cloud_eni_instance_id", "instance ID"),
    (AWS, {"cloud_eni_security_groups": ["gpu-cluster-sg"]}, "cloud_eni_security_groups", "security group ID"),
    (AWS, {"cloud_eni_subnet_cidr": "10.0.64.0"}, "cloud_eni_subnet_cidr", "/30 or larger"),
    (AWS, {"cloud_eni_subnet_cidr": "10.0.64.5/20"}, "cloud_eni_subnet_cidr", "not a subnet in CIDR form"),
    (AWS, {"cloud_eni_gateway": "10.1.0.1"}, "cloud_eni_gateway", "is not in cloud_eni_subnet_cidr"),
    (AWS, {"cloud_eni_mtu": 100000}, "cloud_eni_mtu", "outside 68-9001"),
    (AWS, {"cloud_eni_device_index_start": 0}, "cloud_eni_device_index_start", "primary ENI"),
    (TENCENT, {"cloud_eni_instance_id": "i-0123456789abcdef0"}, "cloud_eni_instance_id", "tencentcloud's form"),
])
def test_cloud_settings_the_api_or_the_network_stage_would_refuse_after_attaching(base, change, variable, fragment):
    (problem,) = stage_settings.check_cloud_eni({**base, **change})
    assert problem.variable == variable and fragment in problem.message


@pytest.mark.parametrize("values", [AWS, TENCENT,
                                    {**AWS, "cloud_eni_instance_id": "i-0123abcd", "cloud_eni_mtu": 9001,
                                     "cloud_eni_region": "us-gov-west-1", "cloud_eni_gateway": "10.0.64.1"},
                                    {"cloud_eni_provider": "", "cloud_eni_region": "whatever"}])
def test_cloud_settings_of_the_providers_forms_pass(values):
    assert stage_settings.check_cloud_eni(values) == []


@pytest.mark.parametrize(("volumes", "expected"), [
    (["/sys:/sys", "/opt/gpucluster/bin:/opt/gpucluster/bin:ro", "/srv:/opt/gpucluster/bin/:ro"],
     ["/opt/gpucluster/bin is mounted twice "
      "(/opt/gpucluster/bin:/opt/gpucluster/bin:ro, /srv:/opt/gpucluster/bin/:ro)"]),
    (["/a:/data", "/b:/data:ro", "/c:/data"], ["/data is mounted twice (/a:/data, /b:/data:ro, /c:/data)"]),
    (["/a:/data", "/b://data/."], ["/data is mounted twice (/a:/data, /b://data/.)"]),
    (["/sys:/sys", "/data:/data:ro", "ckpt:/ckpt", "/data:/data2"], []),
    ([], []),
])
def test_duplicate_mounts_names_each_container_path_mounted_twice(volumes, expected):
    assert stage_settings.duplicate_mounts(volumes) == expected


@pytest.mark.parametrize(("values", "refused"), [
    ({"training_image_ssh_dir": "/etc/gpucluster/ssh"}, False),       # container_ssh_dir's default: the same
    ({"training_image_ssh_dir": "/etc/gpucluster/ssh/"}, False),
    ({"training_image_ssh_dir": "/srv/ssh"}, True),
    ({"training_image_ssh_dir": "/srv/ssh", "container_ssh_dir": "/srv/ssh"}, False),
])
def test_the_ssh_dir_is_judged_against_container_ssh_dir_or_its_default(values, refused):
    defaults = {"container_ssh_dir": "/etc/gpucluster/ssh"}
    problems = stage_settings.stage_problems(values, FACTS, gpus=8, defaults=defaults)
    assert bool(problems) == refused, problems
    if refused:
        assert "('/etc/gpucluster/ssh', container_ssh_dir's default)" in problems[0].message
        assert problems[0].fix == "set container_ssh_dir: /srv/ssh instead (the container follows it), and leave " \
                                  "training_image_ssh_dir unset"


@pytest.mark.parametrize(("path", "fix"), [
    ("/etc/nccl.conf/", "write it without the trailing /: /etc/nccl.conf"),
    ("/etc/nccl.conf ", "write it without the trailing space: /etc/nccl.conf"),
    ("/opt/nccl.conf", "leave it unset (/etc/nccl.conf"),
])
def test_an_nccl_conf_path_names_the_fix_that_fits(path, fix):
    problems = stage_settings.stage_problems({"nccl_env_conf_path": path}, FACTS, gpus=8)
    assert [p.variable for p in problems] == ["nccl_env_conf_path"]
    assert problems[0].fix.startswith(fix), problems[0].fix


def test_a_home_relative_path_is_refused_once_with_the_home_spelt_out():
    problems = stage_settings.stage_problems({"nccl_env_conf_path": "~/.nccl.conf"}, FACTS, gpus=8)
    assert [(p.variable, p.fix) for p in problems] == [("nccl_env_conf_path",
                                                        "give an absolute path, e.g. /root/.nccl.conf")]


def test_the_filter_reads_the_spec_defaults_for_what_the_user_left_unset():
    from tests.conftest import ROOT

    messages = inventory_errors({"training_image_ssh_dir": "/etc/gpucluster/ssh", "training_image_ref": "r/i:1"},
                                "n1", gpu_count=0, facts=FACTS, root=str(ROOT))
    assert not [m for m in messages if "training_image_ssh_dir" in m], messages
    messages = inventory_errors({"training_image_ssh_dir": "/srv/ssh", "training_image_ref": "r/i:1"},
                                "n1", gpu_count=0, facts=FACTS, root=str(ROOT))
    assert any(m.startswith("n1: training_image_ssh_dir: '/srv/ssh'") for m in messages), messages


@pytest.mark.parametrize(("driver", "removed"), [("overlay", "24.0"), ("aufs", "24.0"), ("devicemapper", "25.0"),
                                                 ("overlay2", None), ("btrfs", None), ("zfs", None),
                                                 ("fuse-overlayfs", None), ("vfs", None)])
def test_storage_drivers_docker_removed_are_refused_before_the_file_is_written(driver, removed):
    problems = daemon_json.plan_problems([("docker role", {"log-driver": "json-file"}),
                                          ("docker_daemon_options", {"storage-driver": driver})])
    if removed is None:
        assert problems == []
    else:
        (message,) = problems
        assert f"'storage-driver' is \"{driver}\"" in message and f"removed in {removed}" in message
        assert "Fix: use \"overlay2\"" in message


def test_a_removed_storage_driver_only_in_the_users_own_file_is_theirs():
    # check_keys (the module's check of the written file) leaves it: only what gpucluster would write is refused.
    assert daemon_json.check_keys({"storage-driver": "devicemapper"}) == []


# --- the training container's network mode ----------------------------------------------------------


@pytest.mark.parametrize("mode", ["host", "container:gpucluster-net", "container:3f4e8b2a9c1d"])
def test_a_network_mode_with_the_nodes_namespace_is_accepted(mode):
    assert stage_settings.check_network_mode({"training_image_network_mode": mode}) == []


@pytest.mark.parametrize("mode, said", [
    ("hots", "the Docker network named 'hots'"),      # a misspelt host: Docker takes it for a network name
    ("Host", "the Docker network named 'Host'"),
    ("bridge", "Docker's bridge network"),
    ("default", "Docker's bridge network"),
    ("none", "no network at all"),
    ("", "no mode"),
    (None, "no mode"),
    ("host\n", "the Docker network named 'host\\n'"),
])
def test_a_network_mode_without_the_nodes_addresses_is_refused_naming_why_and_the_fix(mode, said):
    problems = stage_settings.check_network_mode({"training_image_network_mode": mode})
    assert [p.variable for p in problems] == ["training_image_network_mode"]
    assert said in problems[0].message and "sshd (container_ssh_port) would not answer" in problems[0].message
    assert problems[0].fix.startswith("leave it unset (host")


@pytest.mark.parametrize("mode", ["container:", "container:bad name", "container:a:b", "container:abc\n"])
def test_a_container_mode_without_a_valid_container_name_is_refused_as_such(mode):
    problems = stage_settings.check_network_mode({"training_image_network_mode": mode})
    assert [p.variable for p in problems] == ["training_image_network_mode"]
    assert "names no valid container" in problems[0].message and problems[0].fix.startswith("give container:<name>")


@pytest.mark.parametrize("values, defaults", [
    ({"training_image_network_mode": "container:gpucluster-train"},
     {"training_image_container_name": "gpucluster-train"}),
    ({"training_image_network_mode": "container:trainer", "training_image_container_name": "trainer"},
     {"training_image_container_name": "gpucluster-train"}),
    ({"training_image_network_mode": "container:/trainer", "training_image_container_name": "trainer"}, {}),
])
def test_a_container_mode_naming_the_training_container_itself_is_refused(values, defaults):
    """Docker refuses a container that joins its own namespace, after the old one is removed."""
    problems = stage_settings.check_network_mode(values, defaults)
    assert [p.variable for p in problems] == ["training_image_network_mode"]
    assert "names the training container itself (training_image_container_name)" in problems[0].message
    assert problems[0].fix.startswith("name the container that runs with host networking")
    # Another container's name is fine.
    other = {**values, "training_image_network_mode": "container:gpucluster-net"}
    assert stage_settings.check_network_mode(other, defaults) == []


def test_preflight_refuses_the_training_containers_own_name_with_the_roles_default_name():
    values = {"training_image_ref": "r/i:1", "training_image_network_mode": "container:gpucluster-train"}
    messages = inventory_errors(values, "n1", gpu_count=0, facts=FACTS)
    want = "n1: training_image_network_mode: 'container:gpucluster-train' names the training container"
    assert any(m.startswith(want) for m in messages), messages


def test_an_unset_network_mode_is_not_judged_and_the_filter_refuses_a_typo():
    assert stage_settings.check_network_mode({}) == []
    messages = inventory_errors({"training_image_ref": "r/i:1", "training_image_network_mode": "hots"}, "n1",
                                gpu_count=0, facts=FACTS)
    want = "n1: training_image_network_mode: 'hots' gives the training container"
    assert any(m.startswith(want) for m in messages), messages
