"""``python -m byteps.doctor``: the same as ``byteps doctor``."""

import sys

from . import main

sys.exit(main())
