"""Notifications: users subscribe to events of their (and their team's) objects, delivered to a
signed webhook and/or by email, with a log of every attempt."""
