"""``python -m bir.proxy -- <upstream command…>``: the same as ``bir-proxy``."""

from bir.proxy.cli import main

raise SystemExit(main())
