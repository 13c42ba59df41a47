# Stage 0, SSH testbed only (testbed.kind: ssh): make every node of the inventory ready for
# trials, once: packages (apt-get), our tools (tquic-perf on server and client, the queue
# sampler on the gateway, the delay line on a delay node without netem), IPv4 forwarding on
# the gateway. One job per node; its sentinel results/provision/<slice>/<role>.json records
# what the node has. A rebuilt tool (or a changed inventory) re-provisions.
#   snakemake --cores 8 provision        # all nodes of all slices, in parallel
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
        "../envs/trials.yaml"
    script:
        "../workflow/scripts/provision.py"


rule provision:
    input:
        provision_targets(),

