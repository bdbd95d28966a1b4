"""The platform's Django project: configuration and apps."""
