"""The command line: argument parsing (`main`) and what each command does (`commands`)."""
