# Stage 0, SSH testbed only (testbed.kind: ssh): make every node of the inventory ready for
# trials, once: packages (apt-get), our tools (tquic-perf on server and client, the queue
# sampler on the gateway, the delay line on a delay node without netem), IPv4 forwarding on
# the gateway. One job per node; its sentinel results/provision/<slice>/<role>.json records
# what the node has. A rebuilt tool (or a changed inventory) re-provisions.
#   snakemake --cores 8 provision        # all nodes of all slices, in parallel
from latency_divide.inventory import ROLES as INVENTORY_ROLES, load_inventory

SSH_INVENTORY = load_inventory(CFG.testbed.inventory) if CFG.testbed.kind == "ssh" else None


def provision_targets():
    if SSH_INVENTORY is None:
        return []
    return expand("results/provision/{slice}/{role}.json",
                  slice=SSH_INVENTORY.slice_names(), role=list(INVENTORY_ROLES))


def provision_files(wildcards):
    """What a node gets uploaded: a change re-provisions it."""
    return {"server": {"tool": "target/release/tquic-perf"},
            "client": {"tool": "target/release/tquic-perf"},
            "gateway": {"qsampler": "src/latency_divide/qsampler.py"},
            "delay": {"delayline": "target/release/delayline"}}[wildcards.role]


def trial_provision_inputs(wildcards):
    """For rule trial's input: every node provisioned first (nothing for a local testbed)."""
    return provision_targets()


rule provision_node:
    input:
        unpack(provision_files),
        inventory=CFG.testbed.inventory if SSH_INVENTORY is not None else [],
    output:
        "results/provision/{slice}/{role}.json",
    log:
        "logs/provision/{slice}/{role}.log",
    wildcard_constraints:
        slice=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
        role="server|gateway|delay|client",
    conda:
        "../envs/workflow.yaml"
    script:
        "../workflow/scripts/provision.py"


rule provision:
    input:
        provision_targets(),


# `rule all` provisions too (before the trials, once rule trial lists trial_provision_inputs).
TARGET_FUNCTIONS.insert(0, provision_targets)
