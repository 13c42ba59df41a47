"""Snakemake script (rule buffer_depth): the buffer-depth sweeps' trials tables (each step with
its tool) -> their table, figure and provenance sidecar (latency_divide.analysis.depth_figure)."""
import logging

from latency_divide.analysis.depth_figure import build_buffer_depth

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")  # noqa: F821
logging.captureWarnings(True)
rec = build_buffer_depth(snakemake.params.steps, snakemake.params.households,  # noqa: F821
                         snakemake.output.table, snakemake.output.pdf,  # noqa: F821
                         snakemake.output.png, snakemake.output.provenance,  # noqa: F821
                         seed=snakemake.params.seed)  # noqa: F821
tools = ", ".join(dict.fromkeys(s["tool"] for s in snakemake.params.steps))  # noqa: F821
logging.info("%s: %d trials of %d households in %d steps of %s",
             snakemake.output.pdf, len(rec["trials"]),  # noqa: F821
             sum(len(v) for v in rec["households"].values()),
             len(snakemake.params.steps), tools)  # noqa: F821
