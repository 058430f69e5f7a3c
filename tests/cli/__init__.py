"""The `memd` command line: its command table, exit codes and the commands a newcomer meets."""
