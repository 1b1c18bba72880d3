from abbisect.cli import main

main()
