# Shared helpers: the loaded config, wildcard constraints, target functions.
import sys

from snakemake_interface_executor_plugins.settings import ExecMode

from latency_divide.analysis.companions import load_companions, table_files
from latency_divide.config import load_config
from latency_divide.trial.layout import ID_PATTERN
from latency_divide.trial.sweep import trial_ids
from latency_divide.trial.layout import trial_meta_path
from latency_divide.trial.packs import split as split_packed
from latency_divide.ops.admission import app_mbit
from latency_divide.ops.hostcost import trial_host_load as admission_host_load
from latency_divide.data.households import get_household
from latency_divide.links.plan import make_linkplan

# The package's config object: validated, households resolved (IDs checked, samples drawn).
CFG = load_config(config)
HOUSEHOLDS = CFG.household_ids()
# The vendored household data set (an input of every household record).
HOUSEHOLD_DATA = "resources/digitaldivide/household-internet-data.csv"


wildcard_constraints:
    household=r"\d+",


def household_targets():
    return expand("results/households/{household}.json", household=HOUSEHOLDS)


def link_targets():
    return expand("results/links/{household}.json", household=HOUSEHOLDS)


# Every trial of the run: (definition id, household, direction, variant, repetition). The
# definition id (latency_divide.definition) hashes everything that shapes a trial, so a changed
# qfactor, duration, tool, window, delta ... names other trial directories (measured anew) and
# leaves the earlier ones as they are.
TRIALS = trial_ids(CFG)


_LINKPLANS = {}


def trial_host_load(wildcards):
    """A trial's share of this host's CPU (latency_divide.admission), from its link plan: the
    `host_load` resource of rules/trials.smk, admitted against the profile's budget.

    Under a cluster executor (`--executor slurm`, profiles/slurm) this host's budget does not
    bound anything: each node packs trials by its own `hostload` GRES (trial_gres), so the
    trial asks this host for nothing (0), whatever budget the default profile sets."""
    if not workflow.local_exec:
        return 0
    hid = int(wildcards.household)
    if hid not in _LINKPLANS:
        _LINKPLANS[hid] = make_linkplan(get_household(hid, CFG.buckets), qfactor=CFG.qfactor)
    try:
        tool = CFG.tool_for(CFG.variant(wildcards.variant))
    except (KeyError, ValueError):
        return 1  # not this config's variant: the job refuses it at once (workflow_glue)
    return admission_host_load(_LINKPLANS[hid], wildcards.direction, tool.window_bytes,
                               tool.name, CFG.testbed.kind,
                               busy_s=CFG.trial.idle_s + CFG.trial.duration_s,
                               app=app_mbit(tool.args))


# A job process (a Slurm job, and the job step Snakemake starts inside it: its remote and
# subprocess modes) runs the one trial job it was given and nothing else: it skips what only
# the tables, figures and `trials` target read, the packs' indexes and the companions (each
# such start-up paid 1-3 s of CPU for them, twice per Slurm trial). Every rule but `trial` is a
# localrule (Snakefile), run by the Snakemake that submitted the jobs (tests/test_workflow_jobs.py).
JOB_PROCESS = workflow.exec_mode != ExecMode.DEFAULT

TRIAL_METAS = [str(trial_meta_path("results/raw", *t)) for t in TRIALS]
# (meta.json of each trial not in a pack, the pack files the others are read from): a packed
# trial (latency_divide.trial.packs: published, in its definition's packs) is complete
LOOSE_METAS, PACK_FILES = split_packed(TRIAL_METAS) if not JOB_PROCESS else ([], [])


def trial_targets():
    """meta.json of every trial of the run that is not in a pack (a trial directory is
    complete iff it has one)."""
    return LOOSE_METAS


def trial_inputs():
    """What the tables read: the loose trials' meta.json and the packs of the others."""
    return LOOSE_METAS + PACK_FILES


# Analysis and figures (rules/analysis.smk, rules/figures.smk; those files register these
# target functions in TARGET_FUNCTIONS when they are included).
TABLE_FILES = table_files("results")


def percentile_files(root="results", cfg=CFG):
    """The percentile table of a population run (households.population_sample; rules/analysis.smk,
    analysis.population_figures), as a named input/output; none for any other config."""
    return {} if cfg.population is None else {"percentiles": f"{root}/tables/percentiles.parquet"}


def analysis_targets():
    return list(TABLE_FILES.values()) + list(percentile_files().values())


def figure_names(cfg=CFG):
    """The figures a config draws (config.drawable_figures; figures.draw picks among them)."""
    return list(cfg.figures)


def figure_targets(root="results", cfg=CFG):
    return [f"{root}/figures/{fig}.{ext}" for fig in figure_names(cfg)
            for ext in ("pdf", "png", "provenance.json")]


def figure_outputs(root="results", cfg=CFG, category="Figures"):
    """Named outputs of a figures job: <figure>_{pdf,png,provenance} (PDF and PNG in the report)."""
    out = {}
    for fig in figure_names(cfg):
        for ext in ("pdf", "png"):
            out[f"{fig}_{ext}"] = report(
                f"{root}/figures/{fig}.{ext}",
                caption=f"../workflow/report/{fig}.rst",
                category=category,
                subcategory=fig,
                labels={"figure": fig, "format": ext.upper()},
            )
        out[f"{fig}_provenance"] = f"{root}/figures/{fig}.provenance.json"
    return out


def timeseries_household(cfg=CFG):
    """Household of the time-series figure: config figures.timeseries_household if set, else
    None (the first configured household with a valid trial)."""
    chosen = (cfg.raw.get("figures") or {}).get("timeseries_household")
    return int(chosen) if chosen is not None else None


def companion_key(c):
    """A companion's name as a Snakemake input/output name prefix (fast-links: fast_links)."""
    return c.name.replace("-", "_")


def companion_targets():
    """Tables and figures of every companion data set present (COMPANIONS_PRESENT below)."""
    return [t for c in COMPANIONS_PRESENT
            for t in list(table_files(c.root).values())
            + list(percentile_files(c.root, c.cfg).values()) + figure_targets(c.root, c.cfg)]


# Companion data sets (latency_divide.companions): other configs' published trials, analysed
# into results/companions/<name>/ when all their trials are on disk (after `dvc pull`); never
# measured by this run. rules/analysis.smk and rules/figures.smk define one tables job and one
# figures job for all companions present.
COMPANIONS = load_companions(CFG.companions) if not JOB_PROCESS else []
COMPANIONS_PRESENT = []
for _c in COMPANIONS:
    _missing = _c.missing()
    if not _missing:
        COMPANIONS_PRESENT.append(_c)
    elif len(_missing) < len(_c.trials):
        print(f"[latency-divide] companion {_c.name} ({_c.configfile}) left out: "
              f"{len(_missing)} of its {len(_c.trials)} trials are not on disk (first: "
              f"{_missing[0]}); `dvc pull`, or run them with --configfile {_c.configfile}",
              file=sys.stderr)


# `rule all` builds what these functions return; a stage adds its function here.
TARGET_FUNCTIONS = [household_targets, link_targets, lambda: ["results/tables/households.parquet"],
                    trial_targets]


def all_targets():
    return [t for f in TARGET_FUNCTIONS for t in f()]


# SSH testbed provisioning (rules/provision.smk): nodes are made ready before any trial.
from latency_divide.testbed.inventory import load_inventory
from latency_divide.vocab import ROLE_OF as INVENTORY_ROLES

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
            "gateway": {"qsampler": "src/latency_divide/testbed/qsampler.py"},
            "delay": {"delayline": "target/release/delayline"}}[wildcards.role]


def trial_provision_inputs(wildcards):
    """Inputs of the trial rule: every node provisioned first (nothing for a local testbed)."""
    return provision_targets()


# The `all` target provisions too, before the trials (which list trial_provision_inputs).
TARGET_FUNCTIONS.insert(0, provision_targets)
