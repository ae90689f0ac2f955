"""What users hand loopwatch: config files and event sources (files, folders, stdin, a
followed file), read line by line with where each line came from."""
