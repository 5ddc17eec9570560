"""Entry point of ``make bench``: ``python -m bench --help`` lists the options."""

from __future__ import annotations

import sys

from bench.cli import main

sys.exit(main())
