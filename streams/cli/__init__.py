"""The ``loopwatch`` command line: flags, input files, reports; it calls the shells below."""
