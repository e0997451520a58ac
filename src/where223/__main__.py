from where223.cli import main

raise SystemExit(main())
