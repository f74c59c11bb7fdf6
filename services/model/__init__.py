"""The API model: kinds, selectors, quantities, pod helpers, the codec, the bug switches, well-known keys.

Pure data and functions over JSON-like objects: no I/O, no event loop; it imports nothing of kubemesh.
"""
