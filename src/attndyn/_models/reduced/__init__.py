"""Reduced routes: models exact in law on fewer coordinates than N × d."""
