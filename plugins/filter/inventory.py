"""Filters over the inventory checks in ``module_utils/inventory.py``."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.gpucluster.cluster.plugins.module_utils import inventory, membership, stage_settings
from ansible_collections.gpucluster.cluster.plugins.plugin_utils.filter_utils import plain_args

#: The collection these filters belong to (a checkout or an installed collection): its roles' specs.
COLLECTION_ROOT = Path(__file__).resolve().parents[2]


def inventory_errors(hv, host, gpu_count=0, rdma_devices=0, facts=None, root=None):
    """Messages for every bad value among one host's variables (``hv``: the values the user set);
    ``facts``: the host's ``ansible_facts`` (its NICs), for the stages' settings
    (``module_utils/stage_settings.py``); ``root``: the collection whose roles' argument specs hold
    the defaults (default: this one). Every role's defaults stand for what the user left unset, so
    no check keeps a copy of a default."""
    root = Path(root or COLLECTION_ROOT)
    roles = tuple(sorted(p.parents[1].name for p in root.glob("roles/*/meta/argument_specs.yml")))
    defaults = {name: option["default"] for options in inventory.load_role_specs(str(root), roles).values()
                for name, option in options.items() if "default" in option}
    v = {**defaults, **hv}
    problems = []
    problems += inventory.check_training_image(
        v.get("training_image_ref", ""),
        v["training_image_shm_size"],
        v["training_image_ulimit_memlock"],
        v["training_image_privileged"],
        rdma_devices,
    )
    # ansible_port's default is Ansible's own (the ssh connection plugin's port, 22).
    problems += inventory.check_ssh_port(v["container_ssh_port"], v["training_image_network_mode"],
                                         hv.get("ansible_port", 22))
    problems += inventory.check_gpus(gpu_count, v["preflight_require_gpu"])
    problems += stage_settings.stage_problems(hv, facts, gpu_count, defaults)
    return inventory.format_problems(host, problems)


UNSET = inventory.UNSET


def provided_args(values):
    """Drop the names the user did not set (the vars lookup's default, ``UNSET``)."""
    return {k: v for k, v in values.items() if v != UNSET}


def membership_errors(probe, host, group, members, excluded, play_hosts_all, play_hosts, play_batch):
    """Membership refusals for ``host`` (``module_utils/membership.py``); ``probe``: the lost nodes' ping."""
    return membership.membership_errors(host, group, members, excluded, play_hosts_all, play_hosts, play_batch,
                                        membership.probe_unreachable(probe))


def spec_names(root, roles):
    """Every option name of the ``roles``' argument specs (the names preflight reads with the vars lookup)."""
    return sorted({n for options in inventory.load_role_specs(str(root), tuple(roles)).values() for n in options})


def spec_errors(values, host, root, roles):
    """The ``roles``' argument specs against ``values`` (what the user set) -> one message per refusal."""
    specs = inventory.load_role_specs(str(root), tuple(roles))
    return inventory.format_problems(host, inventory.spec_problems(values, specs))


def setting_suspects(names, root, ignore=()):
    """Names among a host's variables (``names``) that look like a gpucluster setting but are none."""
    _options, known, prefixes = inventory.load_known_settings(str(root))
    return inventory.setting_suspects(names, known, prefixes, ignore)


def setting_typos(values, host, root):
    """Refusals of the suspects (``values``: name -> value), each with the closest real setting."""
    options, _known, prefixes = inventory.load_known_settings(str(root))
    return inventory.format_problems(host, inventory.check_setting_typos(values, options, prefixes))


class FilterModule:
    def filters(self):
        return {
            "gpucluster_inventory_errors": plain_args(inventory_errors),
            "gpucluster_provided_args": provided_args,
            "gpucluster_membership_errors": membership_errors,
            "gpucluster_setting_suspects": setting_suspects,
            "gpucluster_spec_names": spec_names,
            "gpucluster_spec_errors": plain_args(spec_errors),
            "gpucluster_setting_typos": plain_args(setting_typos),
            "gpucluster_duplicate_mounts": plain_args(stage_settings.duplicate_mounts),
        }
