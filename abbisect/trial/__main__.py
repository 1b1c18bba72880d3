from abbisect.trial.pipeline import main

raise SystemExit(main())
