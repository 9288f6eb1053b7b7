from omni_core.cli import main

main()
