"""Snakemake script (rule buffers_answer): the population runs' percentile tables -> Facebook's
table beside 2 x BDP and the measured buffers, bulk and live (latency_divide.analysis.answer)."""
import logging

from latency_divide.analysis.answer import build_answer

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")  # noqa: F821
logging.captureWarnings(True)
df = build_answer(snakemake.params.runs, snakemake.output.table,  # noqa: F821
                  snakemake.output.markdown)  # noqa: F821
logging.info("%s: %d rows, runs %s", snakemake.output.table, len(df),  # noqa: F821
             ", ".join(r["name"] for r in snakemake.params.runs))  # noqa: F821
