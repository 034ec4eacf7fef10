from virtdriver.entry import main

raise SystemExit(main())
