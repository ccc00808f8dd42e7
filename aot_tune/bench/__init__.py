"""Runner: measures configs on a device (a CUDA GPU, or the CPU through Triton's interpreter).

``measure`` runs inside a device worker process (``worker``); ``pool`` in the tuning process
owns one such worker per device and isolates crashes and hangs to the config that caused them.
"""
