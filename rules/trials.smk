from latency_divide.ops.hostcheck import host_check_for_run
from latency_divide.ops.progress import health_report, mark_run_start
from latency_divide.ops.slurmnode import slurm_preflight, trial_gres
from latency_divide.ops.workflow import trials_forbidden
from latency_divide.paths import RUN_START
from latency_divide.testbed import loadgate

# Stage 3: trials. One job per (definition, household, direction, variant, repetition) on the
# testbed. A trial directory appears only when complete, so its meta.json is the job's output.
# A trial has no input made by another job (its job computes the household's link plan from the
# data set and its definition), and no params: so nothing but a missing meta.json ever runs it,
# and raw data pulled by DVC (fresh mtimes, no .snakemake metadata) is done. Its definition id
# is in its path (rules/common.smk, TRIALS), so a changed setting names new trials.


wildcard_constraints:
    definition=ID_PATTERN,
    direction="uplink|downlink",
    variant=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    rep=r"\d+",


rule trial:
    input:
        provisioned=ancient(trial_provision_inputs),
    output:
        # protected: Snakemake makes it read-only and refuses to delete it for a re-run, so a
        # measurement is never thrown away by a changed rerun trigger
        meta=protected(
            "results/raw/{definition}/{household}/{direction}/{variant}/rep{rep}/meta.json"
        ),
    log:
        "logs/trial/{definition}/{household}/{direction}/{variant}/rep{rep}.log",
    # A trial uses a fraction of a core: it does not count against --cores (threads: 0) but
    # asks for its expected share of the host's CPU (latency_divide.admission), admitted
    # against the budget in profiles/default/config.yaml (resources: host_load=...).
    threads: 0
    resources:
        host_load=trial_host_load,
        # under Slurm (profiles/slurm): the same model in thousandths of a core, packed
        # against each node's `hostload` GRES (latency_divide.ops.slurmnode, docs/cluster.md)
        gres=lambda wc: trial_gres(CFG, int(wc.household), wc.direction, wc.variant),
        # what a trial job asks Slurm for besides (a local run ignores these): one CPU, shared
        # (threads: 0 would become `--cpus-per-task=0`, which sbatch refuses; the trials'
        # partition has OverSubscribe=FORCE:k, docs/cluster.md); a 60 s trial takes ~75 s, up
        # to 3 attempts with waits: 30 minutes is never binding
        cpus_per_task=1,
        mem_mb=300,
        runtime=30,
    conda:
        "../envs/trials.yaml"
    script:
        "../workflow/scripts/run_trial.py"


# `snakemake trials`: every trial of the run and nothing downstream (dvc.yaml's trials stage).
rule trials:
    input:
        trial_targets(),
    localrule: True


onstart:
    mark_run_start(RUN_START)
    # the load gate (latency_divide.testbed.loadgate) starts each run that measures at the
    # host's ceiling
    if not trials_forbidden():
        loadgate.new_run()
    # under Slurm: fail now, not hang, if the job status check cannot work; export the tool's
    # sha256 to the jobs, whose node check compares (latency_divide.ops.slurmnode)
    slurm_preflight(workflow, CFG.tool.binary())
    # the host check (docs/host.md): once per boot and host, only when trial jobs run here;
    # a host that cannot hold the config's links stops the run now (LATENCY_DIVIDE_HOST_CHECK)
    host_check_for_run(workflow, CFG, trials_forbidden())


# The run's end: did the emulation hold for every trial it measured (docs/emulation.md "Emulation health")
onsuccess:
    for line in health_report(trial_targets(), RUN_START):
        print(line, file=sys.stderr)
