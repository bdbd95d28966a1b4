"""A workspace: JupyterLab run as a task, and the kernel it starts."""
