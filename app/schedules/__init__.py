"""Schedules: cron and interval schedules (cron.py) and the ticks a slotted acquire chooses from (ticks.py)."""
