"""The candidate: the one process that imports a solution, the judge's handle on it, and the protocol between them."""
