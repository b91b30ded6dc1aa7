"""External finality: checkpoints cosigned by independent witnesses (C2SP tlog-witness).

``policy``  which witnesses (name, cosignature key, URL) and how many must have cosigned
            (C2SP tlog-policy text), and judging a cosigned note by it: pure, no I/O
``client``  the tlog-witness ``add-checkpoint`` request over HTTP, one witness at a time
``cosign``  sign a checkpoint, send it to every witness with the consistency proof from
            what each has seen, keep the cosignatures beside the checkpoint

Nothing is imported here, so the offline verifiers load only ``policy``.
"""
