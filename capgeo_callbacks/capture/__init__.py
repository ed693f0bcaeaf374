"""Hidden states, captured and measured: the measuring unit (:mod:`~capgeo_callbacks.capture.unit`: one
hidden-state measure, configured once, fed a batch at a time by whichever framework trains the model), the forward
hooks that keep selected rows, the row selectors, the watched layers, the batch conventions the measures are fed
through, and measuring a model without changing it."""
