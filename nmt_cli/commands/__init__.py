"""One module per subcommand; each exposes `run(...)`, owns its file I/O and progress."""
