"""Model serving: TF Serving layout, client and an embedded TF Serving-compatible server.

Never imports Django.
"""
