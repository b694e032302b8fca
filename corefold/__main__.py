from corefold.cli import main

raise SystemExit(main())
