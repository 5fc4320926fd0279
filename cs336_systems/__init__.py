"""The student package of the CS336 Systems assignment.

Provided (read, don't rewrite): ``model`` (the Transformer LM) and ``model_sizes`` (the five
model sizes). Everything else is a stub with a full contract in its docstring; each raises
``NotImplementedError`` that names its file and its section of ``handout/README.md``.
Tests reach this package only through ``adapters.py``.
"""
