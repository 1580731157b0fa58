"""The models: discrete layer maps, ODEs, SDEs and their exact reductions, behind one
batch-level interface (:class:`.base.AbstractModel`)."""
