# Copyright: gpucluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared documentation of the read-only Debian readers (dpkg_status, apt_state)."""

from __future__ import annotations


class ModuleDocFragment:
    # A module of this collection that reads dpkg's or apt's state on a Debian-family node and
    # changes nothing. The module lists ansible.builtin.action_common_attributes before this
    # fragment; that describes the attributes, this says what the module supports.
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: debian
author:
  - gpucluster contributors
"""
