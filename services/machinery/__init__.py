"""The client runtime: the API client, informers, work queues, leader election, events, the clock, TLS.

What a controller needs to talk to an apiserver and act on what it sees; it stands on `model` only.
"""
