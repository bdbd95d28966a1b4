"""What operators run against a whole installation: backup_create, backup_restore."""
