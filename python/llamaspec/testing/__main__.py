"""``python -m llamaspec.testing OUTDIR [--hybrid]``: write the tiny test models."""

from . import main

raise SystemExit(main())
