import sys

from omni_core.cli import main

sys.exit(main())
