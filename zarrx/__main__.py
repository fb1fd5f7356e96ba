"""``python -m zarrx``: the ``zarrx`` command line (:mod:`zarrx.cli`)."""

import sys

from zarrx.cli import main

sys.exit(main())
