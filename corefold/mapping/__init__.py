"""M4: mapping neuron-level topologies onto a core mesh (SPEC M4, seed 003).

``mapping`` sees a plain weighted graph (:class:`~corefold.mapping.topology.Topology`),
never the ONNX IR. Phases, in data-flow order: ``topology`` (formats, generators) ->
``partition`` (coarsen, initial, refine, exchange, anneal) -> ``place`` (initial, force); every objective is
in ``objectives``.
"""
