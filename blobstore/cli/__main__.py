"""`python -m blobstore.cli`: the `blobstore` command."""

import sys

from blobstore.cli.main import main

sys.exit(main())
