"""Pure parsers of raw measurement output: ``ping`` (ping.py), the bottleneck queue samples
(queue.py), the traffic tool's log (tool.py: tquic-perf and mvfst tperf) and mvfst's qlog
(qlog.py: the RTT samples its Copa sees)."""
