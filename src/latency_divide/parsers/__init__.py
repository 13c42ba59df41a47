"""Pure parsers of raw measurement output: ``ping`` (ping.py), the bottleneck queue samples
(queue.py) and the traffic tool's log (tool.py: tquic-perf and mvfst tperf)."""
