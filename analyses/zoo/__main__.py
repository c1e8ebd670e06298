from analyses.zoo import main

raise SystemExit(main())
