"""Analytic models: numbers from formulas, no step-by-step run.

The cost model (a step's time from the roofline), the serving model (whether a serving point can run), capacity,
batching math, queueing, KV tiers, fairness weights, and the workloads the chapters share. The lowest layer:
it imports nothing else from servelab.
"""
