"""Tools over runs: random hyperparameter search and EMP."""
