"""Writes of the model registry: deploy, labels, canary share, undeploy, bring your own model.

Deploy and upload publish a checked copy and answer at once with a LOADING version; the model
loader (`manage.py model_loader`, a Celery worker on the `models` queue) loads it.

Every change ends in `model_server_sync`, which sends the model server the complete list of
models, versions and labels (TF Serving's HandleReloadConfigRequest replaces the whole list, so
deploying one model never unloads another) and writes the same list to the config file.
"""
