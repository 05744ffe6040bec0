import sys

from flashrepro_harness.cli import main

sys.exit(main())
