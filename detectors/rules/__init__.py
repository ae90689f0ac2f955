"""One module per detector of spec §5: its name, condition, message texts and warning key."""
