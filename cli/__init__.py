"""The `attserve` command line."""
