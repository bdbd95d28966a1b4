"""`python -m serving`: the embedded model server, started with tensorflow_model_server's flags."""

from serving.flags import run

if __name__ == "__main__":
    raise SystemExit(run())
