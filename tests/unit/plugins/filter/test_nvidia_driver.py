"""plugins/filter/nvidia_driver.py: apt sources, versions, branch checks."""

from __future__ import annotations

import pytest
from ansible_collections.gpucluster.cluster.plugins.filter import nvidia_driver as nd

DEBIAN = ["contrib", "non-free", "non-free-firmware"]

# What debootstrap writes (the sandbox's node image).
DEBOOTSTRAP_LIST = "deb http://deb.debian.org/debian bookworm main\n"

# This machine's own /etc/apt/sources.list.d/debian.sources (Debian 12 cloud image style).
HOST_DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
# http://snapshot.debian.org/archive/debian-security/20250520T000000Z
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""

# apt-cache madison nvidia-kernel-dkms on Debian 12 with bookworm and bookworm-security.
MADISON = (
    "nvidia-kernel-dkms | 535.309.01-0+deb12u1 | http://deb.debian.org/debian-security "
    "bookworm-security/non-free amd64 Packages\n"
    "nvidia-kernel-dkms | 535.261.03-1 | http://deb.debian.org/debian bookworm/non-free amd64 Packages\n"
)


def test_debootstrap_source_gets_the_non_free_components_on_the_same_uri():
    out = nd.sources_missing_components({"/etc/apt/sources.list": DEBOOTSTRAP_LIST}, "bookworm", DEBIAN)
    assert out == [{"uris": ["http://deb.debian.org/debian"], "suites": ["bookworm"],
                    "components": DEBIAN, "signed_by": ""}]


def test_deb822_source_keeps_its_suites_and_signing_key():
    out = nd.sources_missing_components({"/etc/apt/sources.list.d/debian.sources": HOST_DEB822}, "bookworm", DEBIAN)
    key = "/usr/share/keyrings/debian-archive-keyring.gpg"
    assert out == [
        {"uris": ["http://deb.debian.org/debian"], "suites": ["bookworm", "bookworm-updates"],
         "components": DEBIAN, "signed_by": key},
        {"uris": ["http://deb.debian.org/debian-security"], "suites": ["bookworm-security"],
         "components": DEBIAN, "signed_by": key},
    ]


def test_components_already_there_add_nothing():
    text = "deb [arch=amd64] http://mirror.example/debian bookworm main contrib non-free non-free-firmware\n"
    assert nd.sources_missing_components({"/etc/apt/sources.list": text}, "bookworm", DEBIAN) == []


def test_only_the_missing_components_are_added():
    text = "deb [signed-by=/etc/apt/keyrings/debian.gpg] http://mirror.example/debian/ bookworm main contrib\n"
    out = nd.sources_missing_components({"/etc/apt/sources.list": text}, "bookworm", DEBIAN)
    assert out == [{"uris": ["http://mirror.example/debian"], "suites": ["bookworm"],
                    "components": ["non-free", "non-free-firmware"], "signed_by": "/etc/apt/keyrings/debian.gpg"}]


def test_the_roles_own_file_is_not_read_back():
    own = "/etc/apt/sources.list.d/gpucluster-nvidia-driver.sources"
    files = {"/etc/apt/sources.list": DEBOOTSTRAP_LIST,
             own: "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: " + " ".join(DEBIAN)}
    assert nd.sources_missing_components(files, "bookworm", DEBIAN, [own])[0]["components"] == DEBIAN
    assert nd.sources_missing_components(files, "bookworm", DEBIAN) == []


def test_disabled_stanzas_deb_src_and_other_releases_do_not_count():
    text = ("Types: deb\nURIs: http://a.example/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n\n"
            "Types: deb-src\nURIs: http://b.example/debian\nSuites: bookworm\nComponents: main\n\n"
            "Types: deb\nURIs: http://c.example/debian\nSuites: trixie\nComponents: main\n")
    with pytest.raises(nd.SourcesError, match="no apt source for 'bookworm' with component main"):
        nd.sources_missing_components({"/etc/apt/sources.list.d/x.sources": text}, "bookworm", DEBIAN)


def test_inline_signed_by_key_is_copied_whole():
    text = ("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By:\n"
            " -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n mQINBGPL\n -----END PGP PUBLIC KEY BLOCK-----\n")
    out = nd.sources_missing_components({"/etc/apt/sources.list.d/d.sources": text}, "bookworm", DEBIAN)
    assert out[0]["signed_by"].splitlines()[1:] == [" -----BEGIN PGP PUBLIC KEY BLOCK-----", " .", " mQINBGPL",
                                                    " -----END PGP PUBLIC KEY BLOCK-----"]


def test_ubuntu_gets_restricted_and_multiverse():
    text = ("deb http://archive.ubuntu.com/ubuntu jammy main\n"
            "deb http://archive.ubuntu.com/ubuntu jammy-updates main restricted\n"
            "deb http://security.ubuntu.com/ubuntu jammy-security main restricted\n")
    out = nd.sources_missing_components({"/etc/apt/sources.list": text}, "jammy", ["restricted", "multiverse"])
    assert out == [
        {"uris": ["http://archive.ubuntu.com/ubuntu"], "suites": ["jammy"], "components": ["restricted", "multiverse"],
         "signed_by": ""},
        {"uris": ["http://archive.ubuntu.com/ubuntu"], "suites": ["jammy-updates"], "components": ["multiverse"],
         "signed_by": ""},
        {"uris": ["http://security.ubuntu.com/ubuntu"], "suites": ["jammy-security"], "components": ["multiverse"],
         "signed_by": ""},
    ]


@pytest.mark.parametrize("text", ["deb http://deb.debian.org/debian\n", "Types: deb\nSuites bookworm\n"],
                         ids=["one-line-cut", "deb822-no-colon"])
def test_unreadable_sources_are_an_error_not_a_guess(text):
    path = "/etc/apt/sources.list.d/x.sources" if text.startswith("Types") else "/etc/apt/sources.list"
    with pytest.raises(nd.SourcesError, match=r"x\.sources|sources\.list line 1"):
        nd.parse_sources({path: text})


@pytest.mark.parametrize(("version", "expected"), [
    ("535.261.03-1", "535.261.03"),
    ("535.309.01-0+deb12u1", "535.309.01"),
    ("1:550.54.15-0ubuntu1", "550.54.15"),
    ("535.183.01", "535.183.01"),
])
def test_upstream_version(version, expected):
    assert nd.upstream(version) == expected


def test_madison_lists_versions_newest_first():
    assert nd.madison_versions(MADISON) == ["535.309.01-0+deb12u1", "535.261.03-1"]
    with pytest.raises(nd.SourcesError, match="madison line 1"):
        nd.madison_versions("nvidia-kernel-dkms 535.261.03-1\n")


def test_the_sources_are_read_only_where_the_choice_needs_them():
    # A rerun keeps the installed driver of the branch: no madison run, and none read.
    assert nd.needs_sources(535, "", "535.261.03-1") is False
    assert nd.pick_version("", 535, "", "535.261.03-1") == "535.261.03-1"
    # A version asked for, nothing installed, or another branch installed: the sources decide.
    assert nd.needs_sources(535, "535.261.03", "535.261.03-1") is True
    assert nd.needs_sources(535, "", "") is True
    assert nd.needs_sources(535, "", "525.147.05-1") is True
    with pytest.raises(nd.SourcesError):
        nd.pick_version("", 535, "", "525.147.05-1")


def test_pick_version_prefers_what_is_asked_then_what_is_installed_then_the_newest():
    assert nd.pick_version(MADISON, 535, "535.261.03") == "535.261.03-1"
    assert nd.pick_version(MADISON, 535, "", "535.261.03-1") == "535.261.03-1"
    assert nd.pick_version(MADISON, 535) == "535.309.01-0+deb12u1"
    # An installed version of another branch does not hold the branch back.
    assert nd.pick_version(MADISON, 535, "", "525.147.05-1") == "535.309.01-0+deb12u1"


def test_pick_version_names_what_the_sources_have():
    with pytest.raises(nd.SourcesError, match="offer no driver of branch 550; they have 535.261.03, 535.309.01"):
        nd.pick_version(MADISON, 550)
    with pytest.raises(nd.SourcesError, match="offer no driver 535.104.05; they have 535.309.01, 535.261.03"):
        nd.pick_version(MADISON, 535, "535.104.05")
    with pytest.raises(nd.SourcesError, match="they have none"):
        nd.pick_version("", 535)


@pytest.mark.parametrize(("branch", "version", "expect"), [
    (535, "", []),
    (570, "570.133.20", []),
    (535, "535.104", []),
    ("r535", "", ["'r535' is not a driver branch"]),
    (5350, "", ["5350 is not a driver branch"]),
    (53, "", ["53 is not a driver branch"]),
    (535, "550.54.15", ["550.54.15 is not of branch 535"]),
    (535, "535", ["'535' is not an NVIDIA driver version"]),
    (535, "535.261.03-1", ["'535.261.03-1' is not an NVIDIA driver version"]),
])
def test_branch_problems(branch, version, expect):
    problems = nd.branch_problems(branch, version)
    assert len(problems) == len(expect)
    for p, e in zip(problems, expect, strict=True):
        assert e in p and "Fix:" in p


def test_filters_turn_errors_into_ansible_errors():
    from ansible.errors import AnsibleFilterError

    f = nd.FilterModule().filters()
    assert set(f) == {"nvidia_driver_missing_components", "nvidia_driver_pick_version",
                      "nvidia_driver_branch_problems", "nvidia_driver_upstream", "nvidia_driver_needs_sources",
                      "nvidia_driver_systemctl_show"}
    with pytest.raises(AnsibleFilterError, match="branch 550"):
        f["nvidia_driver_pick_version"](MADISON, 550)
