"""The ``plenocal`` command line: one entry point, one module per subcommand."""
