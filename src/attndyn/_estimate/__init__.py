"""Monte Carlo estimation of clustering-class probabilities, as a pipeline of small stages:

plan (validate, route, absorb) → checkpoint (resume) → runner (chunk kernel, on all local
devices) → tallies (exact integer sums) → distributed (combine processes) → dataset
(probabilities, Wilson intervals, one provenance format).
"""
