"""``python -m gpuplan``: the command line."""

import sys

from gpuplan.cli import main

sys.exit(main())
