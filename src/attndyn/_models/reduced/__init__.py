"""Reduced routes: models exact in law on fewer coordinates than N × d.

One module per algorithm: :mod:`.reduction` chooses (``DiscreteTransformer.reduction``);
:mod:`.route` is the interface of the Gaussian-value routes, :mod:`.frame_route` the frame
route (any N), :mod:`.chain` the two-token chain (N = 2, Post-LN) and :mod:`.absorbing`
early absorption as a wrapper of either (its bound: :mod:`.absorption`); :mod:`.span` the
span route (values that are multiples of I); :mod:`.frame` and :mod:`.samplers` their
shared frames and exact samplers.
"""
