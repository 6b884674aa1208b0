"""What a verdict rests on besides timing: correctness trials, comparisons, degeneracy, noise, trust, static checks."""
