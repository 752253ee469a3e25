import sys

from dcpmla.serve.cli import main

sys.exit(main())
