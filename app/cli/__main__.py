"""``python -m app.cli``."""

from app.cli.entry import main

raise SystemExit(main())
