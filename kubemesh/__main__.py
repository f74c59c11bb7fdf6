"""`python -m kubemesh`: the `kubemesh` command."""

import sys

from kubemesh.services.tools.cli import main

sys.exit(main())
