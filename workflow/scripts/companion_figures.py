"""Snakemake script (rule companion_figures): every companion data set's figures, in one job
(in as many processes as the rule's threads: analysis.jobs.draw_figures)."""
import logging

from latency_divide.analysis.jobs import draw_figures, figure_tasks

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s")
logging.captureWarnings(True)
draw_figures([t for c in snakemake.params.companions
              for t in figure_tasks(c["figures"], snakemake.input[f"{c['key']}__trials"],
                                    lambda n, key=c["key"]: snakemake.output[f"{key}__{n}"],
                                    household=c["household"],
                                    household_order=c["household_order"])],
             snakemake.threads)
