from lazyd.daemon.main import main

main()
