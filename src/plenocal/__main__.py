import sys

from plenocal.cli.main import main

sys.exit(main())
