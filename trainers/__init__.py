"""Trainers of the project. Importing the package registers nothing: ``trainers.catalog`` lists the trainers and
registers them on demand (``register_trainers()``)."""
