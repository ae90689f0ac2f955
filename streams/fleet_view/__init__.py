"""The fleet view: windows, run activity, spend, alerts, metrics and the dashboard."""
