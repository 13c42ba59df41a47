# latency-divide: the workflow's table of contents.
# Stages: households -> links (-> trials -> analysis -> figures, added by their rule files).
# Run: snakemake --cores 1 all   (config: config/config.yaml; --configfile config/quick.yaml)
import sys

from snakemake.utils import min_version, validate

min_version("9.0")

# Trials are admitted by their host_load budget (profiles/default), not by --cores: Snakemake's
# local executor must not cap them at --cores + 5 (snakemake_executor_plugin_ldlocal). Done
# here, not with `executor:` in profiles/default, which would override `--profile`. And the
# scheduler keeps one re-evaluation timer, not one more per trial ended (its CPU is the trials').
from snakemake_executor_plugin_ldlocal import (fresh_resources, single_reevaluation_timer,
                                               widen_local_executor)

widen_local_executor()
if not single_reevaluation_timer():
    print("[latency-divide] WARNING: this Snakemake's scheduler could not be patched to keep one "
          "re-evaluation timer; a long run costs the trials more CPU (docs/parallel.md)",
          file=sys.stderr)
if not fresh_resources():
    print("[latency-divide] WARNING: this Snakemake's scheduler could not be patched to ask "
          "waiting trials for their resources again; the budget learns only from the runs "
          "before this one (docs/host.md)", file=sys.stderr)


configfile: "config/config.yaml"


# Validation: rules/common.smk calls the package's load_config (the source of truth: schema
# with readable messages naming key and value, then the semantic checks, households resolved);
# Snakemake's own schema check follows and can only agree.
include: "rules/common.smk"


validate(config, "config/schema.yaml")


include: "rules/households.smk"
include: "rules/links.smk"
include: "rules/provision.smk"
include: "rules/trials.smk"
include: "rules/analysis.smk"
# before figures.smk: its rule `analysis` lists DEPTH_TARGETS
include: "rules/depth.smk"
include: "rules/figures.smk"


rule all:
    input:
        all_targets(),
    default_target: True


# Under a cluster executor (profiles/slurm, docs/cluster.md) only trials are cluster jobs: the
# cheap rules run on the submitting host, at once, without a queue wait.
localrules:
    all,
    households,
    households_table,
    linkplans,
    provision_node,
    provision,
    analysis_tables,
    figures,
