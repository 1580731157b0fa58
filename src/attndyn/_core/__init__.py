"""The shared core: sphere geometry, attention, value operators, schemes, observables.

Everything here acts on one configuration ``X`` shaped ``(N, d)`` and knows nothing of the
models, estimators or interfaces built on it.
"""
