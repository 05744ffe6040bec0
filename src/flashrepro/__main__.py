import sys

from flashrepro.cli import main

sys.exit(main())
