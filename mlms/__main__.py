from mlms.cli.main import main

main()
