"""The GRUB drop-in an earlier gpucluster wrote whole (before the managed block, 5cb3239) is
taken over: configure.yml decides on the controller, from the drop-in's text read in
assert.yml, whether ansible.builtin.replace runs, with the one pattern of vars/main.yml. The
pattern must match that old form and nothing the role writes now or a user writes."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROLE = Path(__file__).resolve().parents[3] / "roles/hugepages"
PATTERN = yaml.safe_load((ROLE / "vars/main.yml").read_text())["__hugepages_old_dropin_regexp"]

# roles/hugepages/templates/grub-dropin.cfg.j2 at ee31d75, rendered for 2 x 1 GiB pages.
OLD = (
    "# Ansible managed (gpucluster hugepages role): 2 x 1G pages.\n"
    "# update-grub reads this file after /etc/default/grub; the arguments are appended to\n"
    "# GRUB_CMDLINE_LINUX, whatever /etc/default/grub already sets.\n"
    'GRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX:+$GRUB_CMDLINE_LINUX }default_hugepagesz=1G hugepagesz=1G hugepages=2"\n'
)
USER = "# site: a shorter boot menu\nGRUB_TIMEOUT=2\n"
BLOCK = (
    "# BEGIN gpucluster hugepages managed block (edits inside are overwritten)\n"
    'GRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX:+$GRUB_CMDLINE_LINUX }default_hugepagesz=1G hugepagesz=1G hugepages=2"\n'
    "# END gpucluster hugepages managed block (edits inside are overwritten)\n"
)


def _replace(text: str) -> str:
    """What ansible.builtin.replace does with the pattern (re.MULTILINE, every match)."""
    return re.compile(PATTERN, re.MULTILINE).sub("", text)


def test_the_old_whole_file_form_is_taken_over_and_the_users_lines_after_it_stay():
    assert re.search(PATTERN, OLD + USER)
    assert _replace(OLD + USER) == USER


def test_the_managed_block_a_users_file_and_an_empty_file_are_left_alone():
    for text in (BLOCK, USER + BLOCK, USER, "", BLOCK + OLD):
        assert not re.search(PATTERN, text), text
        assert _replace(text) == text


def test_configure_reads_the_same_pattern_as_the_replace_it_guards():
    tasks = yaml.safe_load((ROLE / "tasks/configure.yml").read_text())
    task = next(t for t in tasks if t["name"] == "Take over a drop-in an earlier gpucluster wrote whole")
    assert task["ansible.builtin.replace"]["regexp"] == "{{ __hugepages_old_dropin_regexp }}"
    assert any("is search(__hugepages_old_dropin_regexp)" in w for w in task["when"])
