# Buffer depth as a factor (issue 41, step 3; docs/population.md "Buffer depth as a factor: the
# sweep"): per tool, the companions of its sweep (latency_divide.analysis.depth.SWEEP_CONFIGS;
# tquic-perf: the population run's 2 x BDP trials, config/buffer-depth-{100,200,500,1000}ms.yaml
# and, optional, the measured buffers of config/population-buffers.yaml; mvfst's tperf:
# population-mvfst.yaml, buffer-depth-mvfst-*.yaml and, optional, population-mvfst-buffers.yaml)
# -> results/tables/buffer_depth.parquet (a `tool` column) and figure buffer_depth (a panel per
# tool; PDF, PNG, provenance sidecar). A tool's sweep is in them when every required companion
# of it is present (COMPANIONS_PRESENT, rules/common.smk: all its trials on disk); built when at
# least one tool's is. An optional companion is a step when present. Reads the companions'
# trials tables (rule companion_tables).
from latency_divide.analysis.depth import (
    SWEEP_CONFIGS,
    fixed_depth,
    sweep_companions,
    sweep_households,
)

# DEPTH_MISSING: per tool left out, its required configs not present
DEPTH_COMPANIONS, DEPTH_MISSING = sweep_companions(COMPANIONS, COMPANIONS_PRESENT)
DEPTH_FILES = {
    "table": "results/tables/buffer_depth.parquet",
    "pdf": "results/figures/buffer_depth.pdf",
    "png": "results/figures/buffer_depth.png",
    "provenance": "results/figures/buffer_depth.provenance.json",
}
# a tool's sweep named, with its steps not all on disk, when any trial of one of its fixed
# depths is on disk (being measured or published in part); silent when none is
for _tool, _files in DEPTH_MISSING.items():
    _depths = [_c for _c in COMPANIONS if _c.configfile in dict(SWEEP_CONFIGS[_tool])
               and fixed_depth(_c.cfg.buffer_model) is not None]
    if any(len(_c.missing()) < len(_c.trials) for _c in _depths):
        _lacking = [_c.name for _c in COMPANIONS if _c.configfile in _files]
        print(f"[latency-divide] buffer_depth: {_tool}'s sweep left out: companion(s) "
              f"{', '.join(_lacking)} not all on disk (docs/population.md, "
              "\"Buffer depth as a factor: the sweep\")", file=sys.stderr)

# the sweep's table and figure, when its companions are present (`all`, and figures.smk's
# rule `analysis`)
DEPTH_TARGETS = list(DEPTH_FILES.values()) if DEPTH_COMPANIONS else []


if DEPTH_COMPANIONS:

    rule buffer_depth:
        input:
            **{companion_key(_c): table_files(_c.root)["trials"] for _c in DEPTH_COMPANIONS},
        output:
            table=DEPTH_FILES["table"],
            **{ext: report(DEPTH_FILES[ext], caption="../workflow/report/buffer_depth.rst",
                           category="Figures", subcategory="buffer_depth",
                           labels={"figure": "buffer_depth", "format": ext.upper()})
               for ext in ("pdf", "png")},
            provenance=DEPTH_FILES["provenance"],
        params:
            steps=[{"name": _c.name, "tool": _c.cfg.tool.name, "buffer_model": _c.cfg.buffer_model,
                    "qfactor": _c.cfg.qfactor, "trials": table_files(_c.root)["trials"]}
                   for _c in DEPTH_COMPANIONS],
            households=sweep_households(DEPTH_COMPANIONS),
            seed=DEPTH_COMPANIONS[0].cfg.seed,
        localrule: True
        conda:
            "../envs/analysis.yaml"
        log:
            "logs/buffer_depth/buffer_depth.log",
        script:
            "../workflow/scripts/buffer_depth.py"


TARGET_FUNCTIONS.append(lambda: DEPTH_TARGETS)


# The answer side by side (issue 41, step 4; docs/population.md "The answer, side by side"):
# every row of Facebook's table beside our change against Cubic under 2 x BDP and under the
# measured buffers, per tool and direction, bulk transfers and live broadcasts (issue 58;
# docs/live.md "Facebook's table, live": Facebook's own metrics and its RTX-overhead rows;
# latency_divide.analysis.answer: PAIRS, the two population runs of one tool and app, and the
# policed live run BESIDE its pair) -> results/tables/buffers_answer.{parquet,md}. A pair is in
# it when both its runs are present; reads their percentile tables (rule companion_tables).
from latency_divide.analysis.answer import answer_pairs, app_of

ANSWER_PAIRS = answer_pairs(COMPANIONS, COMPANIONS_PRESENT)
ANSWER_FILES = {"table": "results/tables/buffers_answer.parquet",
                "markdown": "results/tables/buffers_answer.md"}
ANSWER_TARGETS = list(ANSWER_FILES.values()) if ANSWER_PAIRS else []


if ANSWER_PAIRS:

    rule buffers_answer:
        input:
            **{companion_key(_c): percentile_files(_c.root, _c.cfg)["percentiles"]
               for _pair in ANSWER_PAIRS for _c in _pair},
        output:
            **ANSWER_FILES,
        params:
            runs=[{"name": _c.name, "buffer_model": _c.cfg.buffer_model, "app": app_of(_c.cfg),
                   "percentiles": percentile_files(_c.root, _c.cfg)["percentiles"]}
                  for _pair in ANSWER_PAIRS for _c in _pair],
        localrule: True
        conda:
            "../envs/analysis.yaml"
        log:
            "logs/buffers_answer/buffers_answer.log",
        script:
            "../workflow/scripts/buffers_answer.py"


TARGET_FUNCTIONS.append(lambda: ANSWER_TARGETS)
