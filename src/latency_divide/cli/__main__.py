"""``python -m latency_divide.cli``: the same as the ``latency-divide`` command."""

import sys

from latency_divide.cli import main

sys.exit(main())
