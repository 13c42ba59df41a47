# Stage 5: figures, all in one job (one Python start-up and one plotnine import for all). Each
# figure from the tables: PDF + PNG (both in `snakemake --report`, with the caption
# workflow/report/<figure>.rst) and a provenance sidecar <figure>.provenance.json (households,
# trials with their definition and config hash, trial files with sha256, git revision;
# `latency-divide trace`). figure_names() and the helpers are in rules/common.smk.
# threads: 2: a figures job draws its figures in as many processes as it has threads
# (analysis.jobs.draw_figures; the same bytes). Snakemake gives a job no more threads than
# --cores, so `--cores 1`, as the README types it, draws them in one process: never more cores
# than the user allowed.


rule figures:
    input:
        **TABLE_FILES,
        **percentile_files(),
    output:
        **figure_outputs(),
    params:
        figures=figure_names(),
        household=timeseries_household(),
        household_order=[int(h) for h in HOUSEHOLDS],
    threads: 2
    conda:
        "../envs/analysis.yaml"
    log:
        "logs/figures/figures.log",
    script:
        "../workflow/scripts/figures.py"


TARGET_FUNCTIONS.append(figure_targets)


# One figures job for every companion data set present (rules/common.smk, COMPANIONS_PRESENT):
# one Python start-up and one plotnine import for all. Inputs and outputs are named
# <companion key>__<name>.
if COMPANIONS_PRESENT:

    rule companion_figures:
        input:
            **{f"{companion_key(_c)}__{k}": v for _c in COMPANIONS_PRESENT
               for k, v in {**table_files(_c.root), **percentile_files(_c.root, _c.cfg)}.items()},
        output:
            **{f"{companion_key(_c)}__{k}": v for _c in COMPANIONS_PRESENT
               for k, v in figure_outputs(_c.root, _c.cfg, f"Companion {_c.name}").items()},
        params:
            companions=[{"key": companion_key(_c), "name": _c.name,
                         "figures": figure_names(_c.cfg),
                         "household": timeseries_household(_c.cfg),
                         "household_order": [int(h) for h in _c.cfg.household_ids()]}
                        for _c in COMPANIONS_PRESENT],
        threads: 2
        conda:
            "../envs/analysis.yaml"
        log:
            "logs/companions/figures.log",
        localrule: True
        script:
            "../workflow/scripts/companion_figures.py"


# `snakemake analysis`: tables and figures only (dvc.yaml's analysis stage runs this).
rule analysis:
    input:
        analysis_targets(),
        figure_targets(),
        companion_targets(),
        DEPTH_TARGETS,
        ANSWER_TARGETS,
    localrule: True


# A live run's figure (analysis.live_figures, docs/live.md): the ABR's bitrate and the bottleneck
# queue of one broadcast per variant; only for a config with live variants (tool.app, a
# variant's app), so every other config's DAG is as it was.
LIVE_VARIANTS = [v.name for v in CFG.variants if "-app=live" in CFG.tool_for(v).args]

if LIVE_VARIANTS:

    rule live_figures:
        input:
            trials=TABLE_FILES["trials"],
            queue=TABLE_FILES["queue"],
        output:
            pdf=report("results/figures/live_bitrate_queue.pdf",
                       caption="../workflow/report/live_bitrate_queue.rst", category="Figures",
                       subcategory="live_bitrate_queue", labels={"figure": "live_bitrate_queue",
                                                                 "format": "PDF"}),
            png="results/figures/live_bitrate_queue.png",
            provenance="results/figures/live_bitrate_queue.provenance.json",
        params:
            household_order=[int(h) for h in HOUSEHOLDS],
        conda:
            "../envs/analysis.yaml"
        log:
            "logs/figures/live_figures.log",
        localrule: True
        script:
            "../workflow/scripts/live_figures.py"

    TARGET_FUNCTIONS.append(lambda: ["results/figures/live_bitrate_queue.pdf",
                                     "results/figures/live_bitrate_queue.png",
                                     "results/figures/live_bitrate_queue.provenance.json"])
