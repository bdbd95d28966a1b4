"""`tfp`, the platform's command-line client: it speaks only the public REST API.

It never imports Django or `tfplatform`, so it installs and runs on any machine with
requests and PyYAML.
"""
