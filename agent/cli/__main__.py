"""`python -m agent.cli ...`, the same as `coloc-agent ...`."""

import sys

from agent.cli.main import main

sys.exit(main())
