"""Training engine: runs one Keras model definition on any hardware.

Never imports Django: the platform hands it plain dataclasses and gets plain dataclasses back.
"""
