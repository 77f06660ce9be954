# Copyright: gpucluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared documentation of the read-only fact modules (gpu_facts, rdma_facts, and gather, which runs
fact modules)."""

from __future__ import annotations


class ModuleDocFragment:
    # A fact module of this collection: reads the node, changes nothing, sets ansible_facts. The
    # module lists ansible.builtin.action_common_attributes(.facts) before this fragment; they
    # describe the attributes, this says what the module supports (fragments do not nest).
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
  platform:
    platforms: linux
author:
  - gpucluster contributors
"""
