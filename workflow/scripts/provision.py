"""Snakemake script (rule provision_node): provision one node of the SSH inventory."""
from latency_divide.testbed.ssh.provision import provision_job

provision_job(snakemake)  # noqa: F821 (injected by Snakemake)
