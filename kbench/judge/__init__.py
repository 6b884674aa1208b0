"""What decides a verdict, in the worker's processes: the judge and its candidate, inputs, comparisons, trust and
static checks."""
