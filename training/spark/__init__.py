"""Trials on an existing Spark cluster: one Spark application per attempt, its workers (and
parameter servers) one barrier stage.

    supervise.py  the node's side: starts the driver, hears the tasks, builds the outcome
    driver.py     the Spark application (`python -m training.spark.driver`)
    task.py       one barrier task on an executor: TF_CONFIG from its peers, the trial's own
                  process (`python -m training.trial.worker`), its events and output sent home
    channel.py    how a task's events and output reach the supervisor: TCP, authenticated
    target.py     a Spark cluster as the platform describes it (master, configuration)

Only driver.py and task.py import pyspark, and only supervise.py and target.py are the
platform's to import.
"""
