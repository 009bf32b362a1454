"""``python -m bir.hooks``: the same as the ``bir-hooks`` console script."""

from bir.hooks.daemon import main

raise SystemExit(main())
