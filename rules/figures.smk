# Stage 5: figures. Each figure from the tables: PDF + PNG (both in `snakemake --report`, with
# the caption workflow/report/<figure>.rst) and a provenance sidecar <figure>.provenance.json
# (households, trial files with sha256, config hash, git revision; `latency-divide trace`).
# One rule per figure (figure_<name>), generated below, because a report caption cannot be a
# wildcard path. FIGURE_NAMES and the helpers are in rules/common.smk.

for _fig in FIGURE_NAMES:

    rule:
        name:
            f"figure_{_fig}"
        input:
            **TABLE_FILES,
        output:
            pdf=report(
                f"results/figures/{_fig}.pdf",
                caption=f"../workflow/report/{_fig}.rst",
                category="Figures",
                subcategory=_fig,
                labels={"figure": _fig, "format": "PDF"},
            ),
            png=report(
                f"results/figures/{_fig}.png",
                caption=f"../workflow/report/{_fig}.rst",
                category="Figures",
                subcategory=_fig,
                labels={"figure": _fig, "format": "PNG"},
            ),
            provenance=f"results/figures/{_fig}.provenance.json",
        params:
            figure=_fig,
            config=config,
            household=timeseries_household(),
            household_order=[int(h) for h in HOUSEHOLDS],
        conda:
            "../envs/analysis.yaml"
        log:
            f"logs/figure/{_fig}.log",
        script:
            "../workflow/scripts/figure.py"


TARGET_FUNCTIONS.append(figure_targets)


# `snakemake analysis`: tables and figures only (dvc.yaml's analysis stage runs this).
rule analysis:
    input:
        analysis_targets(),
        figure_targets(),
    localrule: True
