"""daemon_json: merge-not-overwrite of /etc/docker/daemon.json and dockerd's start-up checks.

Every case in tests/fixtures/docker-daemon-json is asserted here as its .md reads it (C15 keys kept
and the reporter's expected file reproduced byte for byte, C16 refusal with line numbers plus the
drop-in runtime, C17 flag-vs-file conflicts, C19 missing runtime binary), followed by the rules
of each function on small inputs.
"""

from __future__ import annotations

import copy
import json
import re

import pytest
from ansible_collections.gpucluster.cluster.plugins.module_utils.daemon_json import (
    DaemonJsonError,
    conflicts,
    decode,
    dockerd_flags,
    environment_files,
    get_path,
    load,
    merge,
    missing_runtimes,
    order_unit_files,
    render,
)

from tests.conftest import fixture_text

D = "docker-daemon-json/"
C15 = D + "C15_daemon_json_existing_keys_must_be_preserved"
C16 = D + "C16_daemon_json_two_objects_smart_quotes_plus_dropin_runtime"
C17 = D + "C17_dockerd_flag_vs_daemon_json_conflict_dgx_dropin"
C19 = D + "C19_default_runtime_nvidia_left_after_uninstall_binary_missing"

# The settings the nvidia-docker2 package meant to add (C15, file 2 / file 3).
NVIDIA_RUNTIME = {"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}}}

# [Service] of /lib/systemd/system/docker.service as shipped by Debian 12's docker.io
# 20.10.24+dfsg1-1+deb12u1 (copied from an installed package).
DEBIAN12_UNIT_PATH = "/lib/systemd/system/docker.service"
DEBIAN12_UNIT = """[Unit]
Description=Docker Application Container Engine
Requires=docker.socket

[Service]
Type=notify
# the default is not to use systemd for cgroups because the delegate issues still
EnvironmentFile=-/etc/default/docker
ExecStart=/usr/sbin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock $DOCKER_OPTS
ExecReload=/bin/kill -s HUP $MAINPID
LimitNOFILE=1048576

[Install]
WantedBy=multi-user.target
"""
# docker-ce's unit (moby contrib/init/systemd/docker.service, 20.10+).
DOCKER_CE_UNIT = """[Service]
Type=notify
ExecStart=/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock
ExecReload=/bin/kill -s HUP $MAINPID
"""


def captured(relpath):
    """(path named on the prompt line, the text printed below it) of a `cat`/`grep` capture."""
    first, _, rest = fixture_text(relpath).partition("\n")
    m = re.search(r"\$ (?:sudo )?(?:cat|grep \S+) (\S+)", first)
    assert m, first
    return m.group(1), rest


def go_map(value):
    """Go's fmt %v of a decoded JSON value (maps print sorted keys), as dockerd errors show it."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_map(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_map(v) for v in value) + "]"
    return str(value)


# ---------------------------------------------------------------------------------------------
# C15: nvidia-docker2 replaced a daemon.json that had only `hosts`
# ---------------------------------------------------------------------------------------------


def test_c15_merge_of_before_file_is_the_reporters_expected_file():
    before = load(fixture_text(C15 + ".1-daemon-json-before.txt"), "/etc/docker/daemon.json")
    expected_text = fixture_text(C15 + ".3-daemon-json-expected-by-reporter.txt")
    merged = merge(before, NVIDIA_RUNTIME)

    assert merged == load(expected_text)
    assert list(merged) == ["hosts", "runtimes"]
    assert merged["hosts"] == ["tcp://127.0.0.1:2375", "unix:///var/run/docker.sock"]
    # Byte for byte the reporter's file when rendered with its 4-space indent.
    assert render(merged, indent=4) == expected_text
    # What the package wrote instead lost `hosts`; the merge does not.
    wrong = load(fixture_text(C15 + ".2-daemon-json-after-package-install-wrong.txt"))
    assert "hosts" not in wrong
    assert merged != wrong
    assert merge(before, NVIDIA_RUNTIME)["runtimes"] == wrong["runtimes"]


def test_c15_rerun_is_idempotent_and_byte_identical():
    before = load(fixture_text(C15 + ".1-daemon-json-before.txt"))
    first = render(merge(before, NVIDIA_RUNTIME))
    second = render(merge(load(first), NVIDIA_RUNTIME))
    assert second == first
    assert merge(load(first), NVIDIA_RUNTIME) == load(first)


def test_c15_default_runtime_only_when_asked():
    before = load(fixture_text(C15 + ".1-daemon-json-before.txt"))
    assert "default-runtime" not in merge(before, NVIDIA_RUNTIME)
    asked = merge(before, dict(NVIDIA_RUNTIME, **{"default-runtime": "nvidia"}))
    assert asked["default-runtime"] == "nvidia"
    assert list(asked) == ["hosts", "runtimes", "default-runtime"]


@pytest.mark.parametrize(("unit_path", "unit", "binary"), [
    (DEBIAN12_UNIT_PATH, DEBIAN12_UNIT, "/usr/sbin/dockerd"),
    ("/lib/systemd/system/docker.service", DOCKER_CE_UNIT, "/usr/bin/dockerd"),
])
def test_c15_hosts_conflicts_with_minus_h_fd_of_the_stock_unit(unit_path, unit, binary):
    merged = merge(load(fixture_text(C15 + ".1-daemon-json-before.txt")), NVIDIA_RUNTIME)
    flags = dockerd_flags([(unit_path, unit)])
    assert [(f.text, f.key) for f in flags] == [
        ("-H fd://", "hosts"), ("--containerd=/run/containerd/containerd.sock", "containerd"),
    ]
    found = conflicts(merged, flags)
    assert [(c.key, c.path, c.flag, c.source) for c in found] == [
        ("hosts", ("hosts",), "-H fd://", unit_path),
    ]
    msg = found[0].message
    assert "specified both as a flag and in the configuration file: hosts" in msg
    assert "override ExecStart in a drop-in" in msg
    assert "remove_keys: ['hosts']" in msg


# ---------------------------------------------------------------------------------------------
# C16: two concatenated objects, the second with typographic quotes; drop-in adds the runtime
# ---------------------------------------------------------------------------------------------


def test_c16_two_objects_and_smart_quotes_refused_with_line_numbers():
    path, text = captured(C16 + ".2-etc-docker-daemon-json.txt")
    assert path == "/etc/docker/daemon.json"
    with pytest.raises(json.JSONDecodeError) as raw:
        json.loads(text)
    assert (raw.value.msg, raw.value.lineno, raw.value.colno) == ("Extra data", 9, 1)

    with pytest.raises(DaemonJsonError) as ei:
        load(text, path)
    err = ei.value
    assert (err.path, err.lineno, err.colno) == (path, 9, 1)
    assert [(p.line, p.column) for p in err.problems] == [(9, 1), (10, 4)]
    two, quotes = err.problems
    assert "second JSON object" in two.message and "line 8, column 1" in two.message
    assert "merge the keys of both objects" in two.fix
    assert "U+201C" in quotes.message and "U+201D" in quotes.message
    assert "columns 4, 8, 12, 23" in quotes.message
    assert "plain double quotes" in quotes.fix
    msg = str(err)
    assert msg.startswith("/etc/docker/daemon.json: not valid JSON, refusing to edit it")
    assert "line 9, column 1:" in msg and "line 10, column 4:" in msg
    assert "Extra data: line 9 column 1" in msg


def test_c16_dropin_runtime_and_daemon_json_runtime_is_reported():
    dropin_path, dropin = captured(C16 + ".1-systemd-drop-in-override-conf.txt")
    _, text = captured(C16 + ".2-etc-docker-daemon-json.txt")
    flags = dockerd_flags([(DEBIAN12_UNIT_PATH, DEBIAN12_UNIT), (dropin_path, dropin)])
    # `ExecStart=` resets the stock command; only the drop-in's flags remain.
    assert [(f.text, f.key, f.source) for f in flags] == [
        ("--host=fd://", "hosts", dropin_path),
        ("--add-runtime=nvidia=/usr/bin/nvidia-container-runtime", "runtimes", dropin_path),
    ]
    # The correct single object: the first object plus the second with ASCII quotes.
    decoder = json.JSONDecoder()
    first, end = decoder.raw_decode(text)
    ascii_text = text.replace("\u201c", '"').replace("\u201d", '"')
    second, _ = decoder.raw_decode(ascii_text, ascii_text.index("{", end))
    repaired = merge(first, second)
    assert repaired == {"runtimes": NVIDIA_RUNTIME["runtimes"], "dns": ["192.0.2.53"]}
    assert load(render(repaired)) == repaired

    found = conflicts(repaired, flags)
    assert [(c.key, c.path, c.source) for c in found] == [("runtimes", ("runtimes", "nvidia"), dropin_path)]
    assert "runtime 'nvidia' is defined twice" in found[0].message
    assert "specified both as a flag and in the configuration file: runtimes" in found[0].message
    assert f"remove --add-runtime=nvidia=/usr/bin/nvidia-container-runtime from the drop-in {dropin_path}" \
        in found[0].message

    # End state: the runtime defined in exactly one place.
    via_flag_only = merge(repaired, {}, remove=["runtimes.nvidia"])
    assert via_flag_only == {"dns": ["192.0.2.53"]}
    assert conflicts(via_flag_only, flags) == []
    assert missing_runtimes(via_flag_only, lambda p: p, flags) == []
    flags_without_runtime = [f for f in flags if f.key != "runtimes"]
    assert conflicts(repaired, flags_without_runtime) == []


# ---------------------------------------------------------------------------------------------
# C17: dockerd refuses keys given both as flag and in daemon.json; DGX OS drop-in
# ---------------------------------------------------------------------------------------------


def test_c17_add_runtime_flag_with_runtimes_in_file_is_the_reported_directive():
    command_line, error = fixture_text(C17 + ".1-dockerd-with-add-runtime-while-daemon-js.txt").splitlines()
    command = command_line.split("$ sudo ", 1)[1]
    file_cfg = NVIDIA_RUNTIME
    assert f"from file: {go_map(file_cfg['runtimes'])}" in error  # the daemon.json of that report
    flags = dockerd_flags([("command line", "ExecStart=" + command)])
    assert [(f.name, f.key, f.value) for f in flags] == [
        ("add-runtime", "runtimes", "nvidia=/usr/bin/nvidia-container-runtime"),
    ]
    directives = re.findall(r"(?:configuration file: |, )([a-z-]+): \(from flag", error)
    assert directives == ["runtimes"]
    assert [c.key for c in conflicts(file_cfg, flags)] == directives


def dgx_flags():
    path, text = captured(C17 + ".2-dgx-os-docker-drop-in.txt")
    assert path == "/etc/systemd/system/docker.service.d/docker-override.conf"
    return path, dockerd_flags([(path, text)])


def test_c17_dgx_dropin_flags():
    path, flags = dgx_flags()
    assert [(f.text, f.key, f.value, f.source) for f in flags] == [
        ("-H fd://", "hosts", "fd://", path),
        ("-s overlay2", "storage-driver", "overlay2", path),
        ("--default-shm-size=1G", "default-shm-size", "1G", path),
    ]


@pytest.mark.parametrize("settings", [
    NVIDIA_RUNTIME,
    dict(NVIDIA_RUNTIME, **{"default-runtime": "nvidia"}),
])
def test_c17_dgx_dropin_adding_runtimes_is_ok(settings):
    _, flags = dgx_flags()
    assert conflicts(merge({}, settings), flags) == []


@pytest.mark.parametrize(("settings", "key", "flag"), [
    ({"storage-driver": "overlay2"}, "storage-driver", "-s overlay2"),
    ({"default-shm-size": "1G"}, "default-shm-size", "--default-shm-size=1G"),
    ({"hosts": ["unix:///var/run/docker.sock"]}, "hosts", "-H fd://"),
])
def test_c17_dgx_dropin_adding_a_flag_key_is_a_conflict(settings, key, flag):
    path, flags = dgx_flags()
    found = conflicts(merge(NVIDIA_RUNTIME, settings), flags)
    assert [(c.key, c.flag, c.source) for c in found] == [(key, flag, path)]
    assert f"specified both as a flag and in the configuration file: {key}" in found[0].message
    assert f"remove {flag} from the drop-in {path}" in found[0].message
    assert f"remove_keys: ['{key}']" in found[0].message


def test_c17_flags_from_an_environment_file():
    # Shape of Amazon Linux 2's docker.service (options in /etc/sysconfig/docker, runtimes in
    # $DOCKER_ADD_RUNTIMES, cf. nvidia-docker #1002); constructed, not captured.
    unit = (
        "[Service]\n"
        "EnvironmentFile=-/etc/sysconfig/docker\n"
        "EnvironmentFile=-/run/docker/runtimes.env\n"
        "ExecStart=/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock \\\n"
        "          $OPTIONS $DOCKER_STORAGE_OPTIONS $DOCKER_ADD_RUNTIMES\n"
    )
    units = [("/usr/lib/systemd/system/docker.service", unit)]
    assert environment_files(units) == ["/etc/sysconfig/docker", "/run/docker/runtimes.env"]
    env = {
        "/etc/sysconfig/docker": '# comment\nOPTIONS="--default-ulimit nofile=32768:65536"\n',
        "/run/docker/runtimes.env":
            "DOCKER_ADD_RUNTIMES=--add-runtime nvidia=/usr/bin/nvidia-container-runtime\n",
    }
    flags = dockerd_flags(units, env)
    assert [(f.key, f.value, f.source) for f in flags][2:] == [
        ("default-ulimits", "nofile=32768:65536", "/etc/sysconfig/docker"),
        ("runtimes", "nvidia=/usr/bin/nvidia-container-runtime", "/run/docker/runtimes.env"),
    ]
    found = conflicts({"default-ulimits": {"nofile": {"Name": "nofile", "Hard": 1, "Soft": 1}}}, flags)
    assert [(c.key, c.source) for c in found] == [("default-ulimits", "/etc/sysconfig/docker")]
    assert "remove --default-ulimit nofile=32768:65536 from /etc/sysconfig/docker" in found[0].message


# ---------------------------------------------------------------------------------------------
# C19: default-runtime nvidia left after the toolkit was uninstalled
# ---------------------------------------------------------------------------------------------


def c19_config():
    text = fixture_text(C19 + ".1-docker-run-after-uninstall.txt")
    binary = re.search(r'exec: "([^"]+)": executable file not found in \$PATH', text).group(1)
    assert binary == "nvidia-container-runtime"
    cfg = {"default-runtime": "nvidia", "runtimes": {"nvidia": {"path": binary, "runtimeArgs": []}}}
    return text, binary, cfg


def test_c19_default_runtime_without_binary_is_reported():
    text, binary, cfg = c19_config()
    asked = []

    def which(p):
        asked.append(p)
        return None

    found = missing_runtimes(cfg, which)
    assert asked == [binary]
    assert [(m.name, m.path, m.source, m.default) for m in found] == [("nvidia", binary, "daemon.json", True)]
    msg = found[0].message
    assert "EVERY `docker run` fails" in msg
    assert f'exec: "{binary}": executable file not found in $PATH' in msg
    assert f'exec: "{binary}": executable file not found in $PATH' in text
    assert "remove_keys: ['runtimes.nvidia', 'default-runtime']" in msg
    assert missing_runtimes(cfg, lambda p: "/usr/bin/" + p) == []


def test_c19_rollback_removes_default_runtime_and_runtime():
    _, _, cfg = c19_config()
    existing = dict(cfg, **{"log-driver": "json-file"})
    rolled_back = merge(existing, {}, remove=["default-runtime", "runtimes.nvidia"])
    assert rolled_back == {"log-driver": "json-file"}
    assert missing_runtimes(rolled_back, lambda p: None) == []


def test_c19_runtime_from_a_dropin_flag_is_checked_too():
    dropin = ("[Service]\nExecStart=\nExecStart=/usr/bin/dockerd -H fd:// "
              "--add-runtime=nvidia=nvidia-container-runtime --default-runtime=nvidia\n")
    path = "/etc/systemd/system/docker.service.d/nvidia.conf"
    flags = dockerd_flags([(path, dropin)])
    found = missing_runtimes({}, lambda p: None, flags)
    assert [(m.name, m.path, m.source, m.default) for m in found] == [
        ("nvidia", "nvidia-container-runtime", path, True),
    ]
    assert f"remove --add-runtime=nvidia=... from {path}" in found[0].message


def test_default_runtime_not_defined_anywhere():
    found = missing_runtimes({"default-runtime": "nvidia"}, lambda p: p)
    assert [(m.name, m.path) for m in found] == [("nvidia", None)]
    assert "specified default runtime 'nvidia' does not exist" in found[0].message
    assert missing_runtimes({"default-runtime": "runc"}, lambda p: None) == []
    # Docker >= 23 shim runtimes have no binary path to check.
    assert missing_runtimes({"runtimes": {"runsc": {"runtimeType": "io.containerd.runsc.v1"}}},
                            lambda p: None) == []


# ---------------------------------------------------------------------------------------------
# load / decode
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "\n", "  \n\t\n"])
def test_load_empty_file_is_empty_config(text):
    assert load(text) == {}


@pytest.mark.parametrize(("text", "line", "column", "what"), [
    ('{\n  "debug": true,\n}\n', 2, 16, "trailing comma before '}'"),
    ('{\n  "dns": ["192.0.2.53",]\n}\n', 2, 23, "trailing comma before ']'"),
    ('{\n  // enable debug\n  "debug": true\n}\n', 2, 3, "comment '// enable debug'"),
    ('{\n  "debug": true /* on */\n}\n', 2, 17, "/* ... */ comment"),
    ('# docker settings\n{"debug": true}\n', 1, 1, "comment '# docker settings'"),
    ("{'debug': true}\n", 1, 2, "single quotes (') at columns 2, 8"),
    ('\ufeff{"debug": true}\n', 1, 1, "byte order mark"),
    ('[{"debug": true}]\n', 1, 1, "top level is a JSON list"),
    ('{"debug": true\n', 2, 1, "Expecting ',' delimiter"),
    ('{"debug": true}\n{"log-level": "warn"}\n', 2, 1, "second JSON object starts here"),
    ('{"debug": true}\n}\n', 2, 1, "text after the end of the JSON object"),
])
def test_load_names_line_column_and_problem(text, line, column, what):
    with pytest.raises(DaemonJsonError) as ei:
        load(text, "/etc/docker/daemon.json")
    err = ei.value
    assert (err.lineno, err.colno) == (line, column)
    assert what in err.problems[0].message
    assert err.problems[0].fix
    assert f"line {line}, column {column}: " in str(err)
    assert "/etc/docker/daemon.json" in str(err) and "Fix: " in str(err)


# daemon_bom.json of the probe: Notepad's "UTF-8" (EF BB BF) before the object. moby d42495033e7a
# (in v23.0.0 as the backport 0b2eecdc8a) drops the BOM in getConflictFreeConfiguration; 20.10 does not.
BOM_TEXT = b'\xef\xbb\xbf{"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}}}\n'


@pytest.mark.parametrize("version", ["23.0.0", "24.0.7", "28.3.2", {"major": 26, "minor": 1}, (25, 0)])
def test_load_bom_is_skipped_for_dockerd_23_and_later(version):
    cfg = load(decode(BOM_TEXT), "/etc/docker/daemon.json", version)
    assert cfg == {"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}}}
    assert not render(cfg).startswith("\ufeff")  # the writer never writes one
    assert load("\ufeff\n", version=version) == {}  # dockerd: BOM dropped, TrimSpace, empty


def test_load_bom_is_refused_for_dockerd_20_10_with_its_version():
    with pytest.raises(DaemonJsonError) as ei:
        load(decode(BOM_TEXT), "/etc/docker/daemon.json", "20.10.24+dfsg1")
    assert "dockerd 20.10 (older than 23.0)" in ei.value.problems[0].message
    assert "dockerd 20.10 would refuse to start" in str(ei.value)


def test_load_bom_with_no_version_names_the_releases_that_refuse_it():
    with pytest.raises(DaemonJsonError) as ei:
        load(decode(BOM_TEXT), "/etc/docker/daemon.json")
    assert "dockerd older than 23.0" in ei.value.problems[0].message and "23.0 and later skip it" in str(ei.value)
    assert "dockerd would refuse to start" not in str(ei.value)


def test_decode_utf16_with_bom_only_for_dockerd_that_reads_it():
    data = b"\xff\xfe" + '{"debug": true}\n'.encode("utf-16-le")  # Windows PowerShell's default
    assert load(decode(data, version="24.0.0"), version="24.0.0") == {"debug": True}
    assert load(decode(b"\xfe\xff" + '{"debug": true}'.encode("utf-16-be"), version="23.0.1")) == {"debug": True}
    with pytest.raises(DaemonJsonError) as ei:
        decode(data, "/etc/docker/daemon.json")
    assert "UTF-16 text (byte order mark FF FE" in str(ei.value) and "23.0 and later decode it" in str(ei.value)


def test_load_smart_quotes_inside_strings_are_content():
    label = "note=it\u2019s \u201cfine\u201d"
    assert load('{"labels": ["' + label + '"]}') == {"labels": [label]}


def test_decode_rejects_non_utf8_with_its_line():
    with pytest.raises(DaemonJsonError) as ei:
        decode(b'{\n  "labels": ["caf\xe9"]\n}\n', "/etc/docker/daemon.json")
    assert (ei.value.lineno, ei.value.colno) == (2, 18)
    assert "0xe9 is not UTF-8" in str(ei.value)
    assert decode(b"{}") == "{}"


# ---------------------------------------------------------------------------------------------
# merge / render
# ---------------------------------------------------------------------------------------------


def test_merge_rules():
    existing = {
        "log-driver": "json-file",
        "log-opts": {"max-size": "10m"},
        "dns": ["192.0.2.53"],
        "runtimes": {"kata": {"path": "/usr/bin/kata-runtime"}},
        "debug": False,
    }
    desired = {
        "log-opts": {"max-file": "3"},
        "dns": ["192.0.2.54", "192.0.2.53"],
        "runtimes": NVIDIA_RUNTIME["runtimes"],
        "debug": True,
        "default-runtime": "nvidia",
    }
    snapshot = copy.deepcopy((existing, desired))
    merged = merge(existing, desired)
    assert merged == {
        "log-driver": "json-file",
        "log-opts": {"max-size": "10m", "max-file": "3"},
        "dns": ["192.0.2.53", "192.0.2.54"],
        "runtimes": {"kata": {"path": "/usr/bin/kata-runtime"}, **NVIDIA_RUNTIME["runtimes"]},
        "debug": True,
        "default-runtime": "nvidia",
    }
    assert list(merged) == ["log-driver", "log-opts", "dns", "runtimes", "debug", "default-runtime"]
    assert (existing, desired) == snapshot  # inputs untouched
    merged["runtimes"]["nvidia"]["runtimeArgs"].append("--debug")
    assert desired["runtimes"]["nvidia"]["runtimeArgs"] == []  # no shared objects


def test_merge_type_change_desired_wins():
    assert merge({"hosts": "unix:///var/run/docker.sock"}, {"hosts": ["fd://"]}) == {"hosts": ["fd://"]}
    with pytest.raises(TypeError):
        merge([], {})


def test_remove_dotted_paths_prunes_emptied_objects():
    cfg = {
        "runtimes": {"nvidia": {"path": "x"}, "io.containerd.runsc.v1": {"path": "y"}},
        "log-opts": {},
        "default-runtime": "nvidia",
    }
    out = merge(cfg, {}, remove=["runtimes.io.containerd.runsc.v1", "default-runtime", "not.there"])
    assert out == {"runtimes": {"nvidia": {"path": "x"}}, "log-opts": {}}
    out = merge(out, {}, remove=[["runtimes", "nvidia"]])
    assert out == {"log-opts": {}}  # runtimes emptied by the removal goes; a pre-existing {} stays
    assert get_path(cfg, "runtimes.io.containerd.runsc.v1") == {"path": "y"}
    assert get_path(cfg, ("runtimes", "nvidia", "path")) == "x"
    assert get_path(cfg, "runtimes.missing") is None


def test_render_is_stable_text():
    cfg = {"b": 1, "a": {"labels": ["caf\u00e9"]}}
    text = render(cfg)
    assert text == '{\n  "b": 1,\n  "a": {\n    "labels": [\n      "caf\u00e9"\n    ]\n  }\n}\n'
    assert render(load(text)) == text
    assert render({}) == "{}\n"


# ---------------------------------------------------------------------------------------------
# systemd units -> dockerd flags
# ---------------------------------------------------------------------------------------------


def test_dockerd_flags_parsing_rules():
    unit = (
        "[Unit]\n"
        "ExecStart=/usr/bin/not-in-service-section --data-root=/x\n"
        "[Service]\n"
        'Environment="EXTRA=--exec-opt native.cgroupdriver=systemd" MIRROR=https://mirror.example\n'
        "ExecStartPre=/usr/bin/dockerd --iptables=false\n"
        "ExecStart=-/usr/bin/dockerd \\\n"
        "  # a comment inside the continuation\n"
        "  -Hunix:///var/run/docker.sock -H=tcp://127.0.0.1:2375 \\\n"
        '  --label "rack=A 1" --debug --iptables=false -l warn --oom-score-adjust -500 \\\n'
        "  $EXTRA --registry-mirror ${MIRROR} --config-file /etc/docker/daemon.json --undefined $UNSET\n"
        "[Install]\n"
        "ExecStart=/usr/bin/dockerd --bip 10.0.0.1/24\n"
    )
    flags = dockerd_flags([("/etc/systemd/system/docker.service", unit)])
    assert [(f.name, f.key, f.value) for f in flags] == [
        ("host", "hosts", "unix:///var/run/docker.sock"),
        ("host", "hosts", "tcp://127.0.0.1:2375"),
        ("label", "labels", "rack=A 1"),
        ("debug", "debug", "true"),
        ("iptables", "iptables", "false"),
        ("log-level", "log-level", "warn"),
        ("oom-score-adjust", "oom-score-adjust", "-500"),
        ("exec-opt", "exec-opts", "native.cgroupdriver=systemd"),
        ("registry-mirror", "registry-mirrors", "https://mirror.example"),
        ("config-file", None, "/etc/docker/daemon.json"),
        ("undefined", "undefined", ""),
    ]
    keys = {"hosts": [], "labels": [], "debug": True, "config-file": "x", "bip": "10.0.0.1/24"}
    found = conflicts(keys, flags)
    assert [(c.key, c.flag) for c in found] == [
        ("hosts", "-Hunix:///var/run/docker.sock -H=tcp://127.0.0.1:2375"),
        ("labels", '--label rack=A 1'),
        ("debug", "--debug"),
    ]
    assert "dockerd flag -Hunix:///var/run/docker.sock -H=tcp://127.0.0.1:2375 in" in found[0].message


def test_dockerd_flags_only_from_a_dockerd_command():
    units = [("/etc/systemd/system/docker.service",
              "[Service]\nExecStart=/usr/local/bin/start-docker.sh -H tcp://0.0.0.0:2375\n")]
    assert dockerd_flags(units) == []
    old = [("/lib/systemd/system/docker.service", "[Service]\nExecStart=/usr/bin/docker daemon -H fd://\n")]
    assert [f.key for f in dockerd_flags(old)] == ["hosts"]


def test_dropin_without_reset_keeps_both_commands():
    dropin = "[Service]\nExecStart=/usr/sbin/dockerd -s zfs\n"
    units = [(DEBIAN12_UNIT_PATH, DEBIAN12_UNIT), ("/etc/systemd/system/docker.service.d/x.conf", dropin)]
    assert [f.key for f in dockerd_flags(units)] == ["hosts", "containerd", "storage-driver"]


def test_nested_objects_are_flattened_like_dockerd():
    flags = dockerd_flags([("/etc/systemd/system/docker.service.d/proxy.conf",
                            "[Service]\nExecStart=\nExecStart=/usr/bin/dockerd --http-proxy=http://proxy:3128\n")])
    cfg = {"proxies": {"http-proxy": "http://other:3128"}, "log-opts": {"http-proxy": "x"}}
    found = conflicts(cfg, flags)
    assert [(c.key, c.path) for c in found] == [("http-proxy", ("proxies", "http-proxy"))]


def test_order_unit_files_follows_systemd_precedence():
    paths = [
        "/lib/systemd/system/docker.service",
        "/etc/systemd/system/docker.service",
        "/lib/systemd/system/docker.service.d/10-vendor.conf",
        "/etc/systemd/system/docker.service.d/20-gpu.conf",
        "/etc/systemd/system/docker.service.d/10-vendor.conf",
        "/run/systemd/system/docker.service.d/05-runtime.conf",
    ]
    assert order_unit_files(paths) == [
        "/etc/systemd/system/docker.service",
        "/run/systemd/system/docker.service.d/05-runtime.conf",
        "/etc/systemd/system/docker.service.d/10-vendor.conf",
        "/etc/systemd/system/docker.service.d/20-gpu.conf",
    ]
