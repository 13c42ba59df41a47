# latency-divide: the workflow's table of contents.
# Stages: households -> links (-> trials -> analysis -> figures, added by their rule files).
# Run: snakemake --cores 1 all   (config: config/config.yaml; --configfile config/quick.yaml)
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


# Schema first (Snakemake's own check), then the package's load_config (rules/common.smk),
# which repeats it with readable messages and adds the semantic checks.
validate(config, "config/schema.yaml")


include: "rules/common.smk"
include: "rules/households.smk"
include: "rules/links.smk"
include: "rules/provision.smk"
include: "rules/trials.smk"


rule all:
    input:
        all_targets(),
    default_target: True
