"""Recorded history: OpenClaw transcripts imported or followed, and replay."""
