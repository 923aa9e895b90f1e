"""The command line: `app` declares the commands and parses their options into typed objects
(`results`: score and plot), `options` holds the options several commands share, `session` the
global options, and `main` runs the app and turns every error into one line and an exit code."""
