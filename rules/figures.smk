# Stage 5: figures. Each figure from the tables: PDF + PNG (both in `snakemake --report`, with
# the caption workflow/report/<figure>.rst) and a provenance sidecar <figure>.provenance.json
# (households, trial files with sha256, config hash, git revision; `latency-divide trace`).

FIGURE_NAMES = ["delay_tput", "self_delay", "timeseries", "divide"]


wildcard_constraints:
    figure="|".join(FIGURE_NAMES),


def timeseries_household():
    """Household of the time-series panel: config figures.timeseries_household if set (None:
    the first configured household with a valid trial)."""
    chosen = (config.get("figures") or {}).get("timeseries_household")
    return int(chosen) if chosen is not None else None


rule figure:
    input:
        **TABLE_FILES,
    output:
        pdf=report(
            "results/figures/{figure}.pdf",
            caption="../workflow/report/{figure}.rst",
            category="Figures",
            subcategory="{figure}",
            labels={"figure": "{figure}", "format": "PDF"},
        ),
        png=report(
            "results/figures/{figure}.png",
            caption="../workflow/report/{figure}.rst",
            category="Figures",
            subcategory="{figure}",
            labels={"figure": "{figure}", "format": "PNG"},
        ),
        provenance="results/figures/{figure}.provenance.json",
    params:
        config=config,
        household=timeseries_household(),
        household_order=[int(h) for h in HOUSEHOLDS],
    conda:
        "../envs/analysis.yaml"
    log:
        "logs/figure/{figure}.log",
    script:
        "../workflow/scripts/figure.py"


def figure_targets():
    return expand(
        "results/figures/{figure}.{ext}",
        figure=FIGURE_NAMES,
        ext=["pdf", "png", "provenance.json"],
    )


TARGET_FUNCTIONS.append(figure_targets)
