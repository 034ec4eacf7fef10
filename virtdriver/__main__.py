from virtdriver.cli import main

raise SystemExit(main())
