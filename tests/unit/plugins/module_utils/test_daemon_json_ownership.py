"""daemon_json ownership core: own(), merge_contributions(), check_keys(), on the fixtures.

One owner of /etc/docker/daemon.json: the keys gpucluster wanted on the last run (the record on
the node) decide what a rerun may remove; everything else is the user's and stays (C15). A
default-runtime left behind when the toolkit's contribution goes (C19) is removed by the record.
"""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.daemon_json import (
    KNOWN_KEYS,
    DaemonJsonError,
    check_keys,
    conflicts,
    dockerd_flags,
    known_keys,
    leaves,
    load,
    log_opts_problems,
    merge_contributions,
    own,
    plan_problems,
)

from tests.conftest import fixture_text

D = "docker-daemon-json/"
C15 = D + "C15_daemon_json_existing_keys_must_be_preserved"
C16 = D + "C16_daemon_json_two_objects_smart_quotes_plus_dropin_runtime"
C17 = D + "C17_dockerd_flag_vs_daemon_json_conflict_dgx_dropin"
C19 = D + "C19_default_runtime_nvidia_left_after_uninstall_binary_missing"
NVIDIA = {"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}}}
RDMA = {"default-ulimits": {"memlock": {"Name": "memlock", "Soft": -1, "Hard": -1}}}
DOCKER = {"log-driver": "json-file", "log-opts": {"max-size": "100m", "max-file": "3"}}


def c15_before():
    return load(fixture_text(C15 + ".1-daemon-json-before.txt"))


def test_c15_first_run_keeps_the_users_hosts_in_place_and_adds_the_managed_keys():
    user = c15_before()
    desired = merge_contributions([("rdma", RDMA), ("toolkit", NVIDIA), ("docker", DOCKER)])
    result = own(user, desired, previous={})
    assert list(result.config)[0] == "hosts"
    assert result.config["hosts"] == user["hosts"]
    expected_reporter = load(fixture_text(C15 + ".3-daemon-json-expected-by-reporter.txt"))
    assert result.config["runtimes"] == expected_reporter["runtimes"]
    assert result.config["default-ulimits"] == RDMA["default-ulimits"]
    assert result.changed == ["default-ulimits", "runtimes", "log-driver", "log-opts"]
    assert result.removed == [] and result.taken_over == []


def test_c15_a_contribution_dropped_on_the_next_run_leaves_the_file_the_user_key_stays():
    desired1 = merge_contributions([("rdma", RDMA), ("toolkit", NVIDIA), ("docker", DOCKER)])
    run1 = own(c15_before(), desired1, previous={})
    desired2 = merge_contributions([("toolkit", NVIDIA), ("docker", DOCKER)])
    run2 = own(run1.config, desired2, previous=desired1)
    assert "default-ulimits" not in run2.config  # the emptied object goes too
    assert run2.removed == ["default-ulimits.memlock.Name", "default-ulimits.memlock.Soft",
                            "default-ulimits.memlock.Hard"]
    assert run2.config["hosts"] == c15_before()["hosts"]
    assert run2.changed == ["default-ulimits"]
    # and a third run with the same wishes changes nothing
    run3 = own(run2.config, desired2, previous=desired2)
    assert run3.config == run2.config and run3.changed == [] and run3.removed == []


def test_c19_default_runtime_goes_with_the_toolkits_contribution():
    # C19: default-runtime nvidia stayed after the toolkit was removed; every docker run failed.
    assert "executable file not found" in fixture_text(C19 + ".1-docker-run-after-uninstall.txt")
    toolkit = dict(NVIDIA, **{"default-runtime": "nvidia"})
    run1 = own({"dns": ["192.0.2.53"]}, merge_contributions([("toolkit", toolkit)]), previous={})
    assert run1.config["default-runtime"] == "nvidia"
    run2 = own(run1.config, {}, previous=toolkit)
    assert run2.config == {"dns": ["192.0.2.53"]}
    assert set(run2.removed) == {"runtimes.nvidia.path", "runtimes.nvidia.runtimeArgs", "default-runtime"}


def test_a_one_off_extra_var_key_goes_away_on_the_next_run():
    once = dict(DOCKER, debug=True)
    run1 = own({}, once, previous={})
    run2 = own(run1.config, DOCKER, previous=once)
    assert "debug" not in run2.config and run2.removed == ["debug"] and run2.changed == ["debug"]


def test_a_managed_key_changed_by_hand_is_kept_and_reported_not_deleted():
    run1 = own({}, dict(DOCKER, mtu=9000), previous={})
    by_hand = dict(run1.config, mtu=1500)
    run2 = own(by_hand, DOCKER, previous=dict(DOCKER, mtu=9000))
    assert run2.config["mtu"] == 1500 and run2.kept == ["mtu"] and run2.removed == []


def test_list_items_gpucluster_added_go_the_users_items_stay():
    user = {"registry-mirrors": ["https://mirror.user.example"]}
    mine = {"registry-mirrors": ["https://a.example", "https://b.example"]}
    run1 = own(user, mine, previous={})
    assert run1.config["registry-mirrors"] == ["https://mirror.user.example", "https://a.example",
                                               "https://b.example"]
    run2 = own(run1.config, {"registry-mirrors": ["https://b.example"]}, previous=mine)
    assert run2.config["registry-mirrors"] == ["https://mirror.user.example", "https://b.example"]
    run3 = own(run2.config, {}, previous={"registry-mirrors": ["https://b.example"]})
    assert run3.config["registry-mirrors"] == ["https://mirror.user.example"]
    run4 = own({"registry-mirrors": ["https://b.example"]}, {}, previous={"registry-mirrors": ["https://b.example"]})
    assert run4.config == {}


def test_user_log_opts_members_survive_a_managed_max_size_and_a_taken_over_value_is_reported():
    user = {"log-opts": {"max-size": "10m", "labels": "team"}}
    result = own(user, DOCKER, previous={})
    assert result.config["log-opts"] == {"max-size": "100m", "labels": "team", "max-file": "3"}
    assert result.taken_over == [("log-opts.max-size", "10m", "100m")]


def test_explicit_remove_keys_still_apply():
    result = own({"runtimes": NVIDIA["runtimes"], "dns": ["1.1.1.1"]}, {}, previous={},
                 remove=["runtimes.nvidia"])
    assert result.config == {"dns": ["1.1.1.1"]}


def test_inputs_are_not_modified():
    user = c15_before()
    prev = dict(DOCKER, debug=True)
    existing = own(user, prev, {}).config
    snapshot = repr((existing, prev))
    own(existing, DOCKER, prev)
    assert repr((existing, prev)) == snapshot


def test_two_sources_setting_one_key_differently_are_refused_naming_both():
    with pytest.raises(ValueError) as ei:
        merge_contributions([("docker_data_root", {"data-root": "/data/docker"}),
                             ("docker_daemon_options", {"data-root": "/srv/docker"})])
    msg = str(ei.value)
    assert "'data-root'" in msg and "docker_data_root" in msg and "docker_daemon_options" in msg
    # the same value twice, and lists, merge
    assert merge_contributions([("a", {"dns": ["x"], "mtu": 1}), ("b", {"dns": ["y"], "mtu": 1})]) == \
        {"dns": ["x", "y"], "mtu": 1}


def test_c16_invalid_user_file_is_refused_before_ownership_is_computed():
    with pytest.raises(DaemonJsonError):
        load(fixture_text(C16 + ".2-etc-docker-daemon-json.txt").partition("\n")[2])


def test_c17_a_dropin_flag_conflicts_with_a_managed_key_the_runtime_does_not():
    dropin = fixture_text(C17 + ".2-dgx-os-docker-drop-in.txt").partition("\n")[2]
    flags = dockerd_flags([("/etc/systemd/system/docker.service.d/docker-override.conf", dropin)])
    desired = merge_contributions([("toolkit", NVIDIA), ("opts", {"default-shm-size": "2G"})])
    cfg = own({}, desired, {}).config
    assert check_keys(cfg) == []
    assert [c.key for c in conflicts(cfg, flags)] == ["default-shm-size"]


@pytest.mark.parametrize("cfg, key, words", [
    ({"debgu": True}, "debgu", ["not a daemon.json key", "Did you mean 'debug'"]),
    ({"insecure-registry": ["r:5000"]}, "insecure-registry", ["Did you mean 'insecure-registries'"]),
    ({"mtu": "9000"}, "mtu", ["a whole number"]),
    ({"log-opts": {"max-file": 3}}, "log-opts", ["an object of strings"]),
    ({"live-restore": "true"}, "live-restore", ["true or false"]),
    ({"insecure-registries": "r:5000"}, "insecure-registries", ["an array of strings"]),
    ({"default-ulimits": {"memlock": {"Name": "memlock", "Hard": "-1", "Soft": -1}}}, "default-ulimits",
     ["numbers, not strings"]),
    ({"runtimes": {"nvidia": "/usr/bin/nvidia-container-runtime"}}, "runtimes", ['"path" string']),
])
def test_check_keys_refuses_unknown_keys_and_wrong_types_naming_key_and_fix(cfg, key, words):
    problems = check_keys(cfg)
    assert [p.key for p in problems] == [key]
    assert all(w in problems[0].message for w in words), problems[0].message
    assert "Fix:" in problems[0].message


def test_check_keys_accepts_the_managed_and_fixture_keys():
    cfg = own(c15_before(), merge_contributions([("rdma", RDMA), ("toolkit", NVIDIA), ("docker", DOCKER)]),
              {}).config
    assert check_keys(cfg) == []
    assert check_keys({"default-address-pools": [{"base": "10.201.0.0/16", "size": 24}],
                       "features": {"buildkit": True}, "data-root": "/data"}) == []
    assert check_keys({"x": 1, "mtu": 1}, keys=["mtu"]) == []
    assert all(k == k.lower() for k in KNOWN_KEYS)


def test_leaves_paths():
    assert leaves({"a": {"b": 1, "c": {}}, "d": [1]}) == [(("a", "b"), 1), (("a", "c"), {}), (("d",), [1])]


# --- keys per dockerd release (moby cmd/dockerd/config*.go at each minor tag, v20.10.24 .. v28.5.2) ----

# The probe's inputs (p4.py): keys dockerd accepts that were reported as "dockerd refuses to start".
NEWER_KEYS = {"bip6": "fd00:1::1/64", "ip-forward-no-drop": True, "allow-direct-routing": False,
              "host-gateway-ips": ["192.0.2.1"]}


@pytest.mark.parametrize("cfg", [{"graph": "/data/docker"}, {"network-diagnostic-port": 2000}, NEWER_KEYS])
def test_check_keys_accepts_keys_some_release_has_when_the_version_is_unknown(cfg):
    assert check_keys(cfg) == []
    assert plan_problems([("settings", cfg)]) == []


def test_check_keys_follows_the_release_of_dockerd():
    # graph / network-diagnostic-port: hidden flags of v20.10.24 cmd/dockerd/config.go; graph gone in v24.0.0.
    assert check_keys({"graph": "/data/docker", "network-diagnostic-port": 2000}, version="20.10.24+dfsg1") == []
    assert check_keys({"graph": "/data/docker"}, version="23.0.6") == []
    [graph] = check_keys({"graph": "/data/docker", "network-diagnostic-port": 2000}, version="24.0.0")
    assert graph.key == "graph" and "only dockerd up to 23.0 do" in graph.message
    # bip6, ip-forward-no-drop, host-gateway-ips since v28.0.0; allow-direct-routing since v28.2.0.
    assert check_keys(NEWER_KEYS, version="28.3.2") == []
    assert [p.key for p in check_keys(NEWER_KEYS, version="28.1.1")] == ["allow-direct-routing"]
    old = check_keys(NEWER_KEYS, version={"major": 20, "minor": 10})
    assert [p.key for p in old] == list(NEWER_KEYS)
    assert all("dockerd 20.10 does not know it" in p.message and "refuses to start" in p.message for p in old)
    # oom-score-adjust: flag removed in v26.0.0; proxies (the http-proxy flags) since v23.0.0.
    assert check_keys({"oom-score-adjust": -500}, version="25.0.5") == []
    assert [p.key for p in check_keys({"oom-score-adjust": -500}, version="26.1.3")] == ["oom-score-adjust"]
    assert [p.key for p in check_keys({"proxies": {"http-proxy": "http://p:3128"}}, version="20.10.24")] == ["proxies"]
    assert set(known_keys("28.3.2")) - set(known_keys("20.10.24")) >= set(NEWER_KEYS)
    assert set(known_keys()) == set(KNOWN_KEYS)


def test_check_keys_a_key_no_release_knows_is_refused_for_every_version():
    for version in (None, "20.10.24", "28.3.2"):
        [p] = check_keys({"debgu": True}, version=version)
        assert "refuses to start" in p.message and "Did you mean 'debug'" in p.message
    [newer] = check_keys({"debgu": True}, version="29.0.0")
    assert "outside that range" in newer.message


def test_check_keys_a_flag_name_is_accepted_and_ignored_not_a_refusal():
    [p] = check_keys({"label": ["rack=A1"]})
    assert "starts but ignores it" in p.message and "Did you mean 'labels'" in p.message
    assert "refuses to start" not in p.message


def test_check_keys_graph_with_data_root_is_refused():
    [p] = check_keys({"graph": "/a", "data-root": "/b"}, version="20.10.24")
    assert "cannot specify both" in p.message


# --- log-opts: mode and max-buffer-size are every driver's (moby daemon/logger/factory.go builtInLogOpts)

def test_log_opts_mode_and_max_buffer_size_are_accepted_for_every_driver():
    cfg = {"log-driver": "json-file", "log-opts": {"max-size": "100m", "max-file": "3", "mode": "non-blocking",
                                                   "max-buffer-size": "4m"}}
    assert check_keys(cfg) == []
    assert log_opts_problems("local", {"mode": "blocking"}) == []
    assert log_opts_problems("journald", {"mode": "non-blocking", "max-buffer-size": "1m"}) == []


@pytest.mark.parametrize("driver, opts, words", [
    ("json-file", {"mode": "nonblocking"}, "logging mode not supported: nonblocking"),
    ("syslog", {"mode": "async"}, "logging mode not supported: async"),
    ("json-file", {"max-buffer-size": "4m"}, "only supported with 'mode=non-blocking'"),
    ("local", {"mode": "non-blocking", "max-buffer-size": "four"}, "error parsing option max-buffer-size"),
])
def test_log_opts_mode_is_validated(driver, opts, words):
    [why] = log_opts_problems(driver, opts)
    assert words in why and "Fix:" in why
    assert log_opts_problems("none", opts) == []  # ValidateLogOpts returns early for "none"
